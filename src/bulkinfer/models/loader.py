"""Read a checkpoint's config, build the model that runs it, and read its safetensors straight into our layout."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Container, Iterator

import torch
from torch import nn
from safetensors import safe_open

from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import SINGLE, TensorParallel
from bulkinfer.models.checkpoint import safetensors_files
from bulkinfer.layers.quantize import quantize_layers
from bulkinfer.layers.quantized_weights import MXFP4, WeightFormat
from bulkinfer.models.config import SUPPORTED_ARCHITECTURES, ModelConfig, native_architecture
from bulkinfer.models.gpt_oss_weights import gpt_oss_tensors
from bulkinfer.models.granite_weights import granite_tensors
from bulkinfer.models.lfm2 import LFM2_RENAMES
from bulkinfer.models.llama import CausalLM
from bulkinfer.models.quantization.config import quantization_from_hf
from bulkinfer.models.quantization.tensors import canonical_tensors, quantized_layers
from bulkinfer.models.refusal import UnsupportedModelError, refuse_tokenizer_code, refusal_reason

logger = logging.getLogger(__name__)


def read_config(path: Path, model_impl: str = "auto") -> tuple[ModelConfig, dict]:
    """The checkpoint's config, for bulkinfer's own code (``native``) or transformers' (``transformers``);
    ``auto`` takes native code where it exists. A model neither can run is refused here, in one line, and so
    is one whose tokenizer or weights would run the checkpoint's code, before anything loads."""
    hf = json.loads((path / "config.json").read_text())
    config = _model_config(path, hf, model_impl)
    refuse_tokenizer_code(path)
    safetensors_files(path)
    return config, hf


def _model_config(path: Path, hf: dict, model_impl: str) -> ModelConfig:
    if model_impl == "native" or (model_impl == "auto" and native_architecture(hf)):
        return ModelConfig.from_hf(hf)
    reason = refusal_reason(hf)
    names = ", ".join(hf.get("architectures") or ()) or "(none given in config.json)"
    if reason:
        raise UnsupportedModelError(f"unsupported architecture {names}: {reason}")
    if quantization_from_hf(hf):
        raise UnsupportedModelError(f"quantized {names}: quantized checkpoints run on bulkinfer's own model code "
                                    f"only, which runs {', '.join(SUPPORTED_ARCHITECTURES)}")
    from bulkinfer.models.transformers_backend.config import transformers_model_config

    return transformers_model_config(path, hf)


def load_model(path: Path, config: ModelConfig, dtype: torch.dtype, device: torch.device,
               ops: KernelOps, max_position: int, tp: TensorParallel = SINGLE) -> nn.Module:
    """The model, its weights loaded: bulkinfer's CausalLM, or a transformers model behind the same interface."""
    if config.implementation == "transformers":
        from bulkinfer.models.transformers_backend.model import load_transformers_model

        return load_transformers_model(path, config, dtype, device, ops)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = _build(path, config, ops, max_position, tp, device)
    finally:
        torch.set_default_dtype(default_dtype)
    load_weights(model, path)
    # Inference only: no parameter keeps autograd state (a CUDA graph's pool would keep activations).
    return model.eval().requires_grad_(False)


def _build(path: Path, config: ModelConfig, ops: KernelOps, max_position: int, tp: TensorParallel,
           device: torch.device) -> CausalLM:
    """The model with empty parameters. A quantized one is first built without memory, so that its
    quantized layers never hold a plain weight, even for a moment."""
    formats = _quantized_modules(path, config, tp)
    if not formats:
        with torch.device(device):
            return CausalLM(config, ops, max_position, tp)
    with torch.device("meta"):
        model = CausalLM(config, ops, max_position, tp)
        quantize_layers(model, formats)
    model.materialize(device)
    return model


def keeps_mxfp4(config: ModelConfig, tp: TensorParallel) -> bool:
    """Whether gpt-oss's MXFP4 experts stay MXFP4 on ``tp``'s ranks: each rank's share of an expert's columns
    must be whole groups of 32, as their scales are. Otherwise (gpt-oss's 2,880 columns over 4 or 8 ranks)
    they are dequantized at load, and take 3.8 times the memory in bfloat16."""
    return config.mxfp4_experts and (config.moe.intermediate_size // tp.size) % MXFP4.group_size == 0


def _quantized_modules(path: Path, config: ModelConfig, tp: TensorParallel) -> dict[str, WeightFormat]:
    """Our linear layer, or stack of experts, of each quantized checkpoint layer -> its format."""
    if keeps_mxfp4(config, tp):
        return {f"model.layers.{layer}.mlp.experts": MXFP4 for layer in sorted(config.moe.sparse_layers)}
    if config.mxfp4_experts and tp.rank == 0:
        logger.warning("the MXFP4 experts are dequantized at load (3.8 times the memory in bfloat16): %d columns "
                       "of each over %d ranks are not whole groups of 32", config.moe.intermediate_size, tp.size)
    if config.quantization is None:
        return {}
    fmt = config.quantization.layout.format
    targets = {_target(f"{layer}.weight")[0] for layer in quantized_layers(path, config.quantization.layout)}
    # A linear layer's target is its weight; an expert's, its stack's gate_up_proj or down_proj.
    modules = {target.rpartition(".")[0] for target in targets}
    if fmt.act_order and any(name.endswith(".experts") for name in modules):
        raise UnsupportedModelError(f"{config.quantization.describe()} for mixture-of-experts experts: "
                                    "bulkinfer runs quantized experts without act-order")
    return dict.fromkeys(modules, fmt)


# LFM2's names -> ours, then Mixtral's names for its experts and DeepSeek's for its shared experts -> Qwen's,
# which are ours.
_RENAMES = [*LFM2_RENAMES,
            (re.compile(r"\.block_sparse_moe\."), ".mlp."),
            (re.compile(r"\.mlp\.shared_experts\."), ".mlp.shared_expert."),
            (re.compile(r"(\.experts\.\d+)\.w1\."), r"\1.gate_proj."),
            (re.compile(r"(\.experts\.\d+)\.w3\."), r"\1.up_proj."),
            (re.compile(r"(\.experts\.\d+)\.w2\."), r"\1.down_proj.")]
# A linear layer's tensors: plain, or a quantized layer's or expert's canonical ones (layers/quantized_weights.py).
_LINEAR = r"(weight|bias|qweight|scales|zeros|perm|weight_scale|blocks)"
# Checkpoint tensor name -> (our fused parameter, which part of it). An expert's tensors fill its
# slot of the stacked expert parameters (or of a quantized stack's).
_FUSED = [
    (re.compile(rf"(.*)\.self_attn\.([qkv])_proj\.{_LINEAR}$"), r"\1.self_attn.qkv_proj.\3"),
    (re.compile(r"(.*\.experts)\.\d+\.(gate|up)_proj\.bias$"), r"\1.gate_up_bias"),  # gpt-oss's expert biases
    (re.compile(r"(.*\.experts)\.\d+\.(down)_proj\.bias$"), r"\1.down_bias"),
    (re.compile(r"(.*\.experts)\.\d+\.(gate|up)_proj\.weight$"), r"\1.gate_up_proj"),
    (re.compile(r"(.*\.experts)\.\d+\.(down)_proj\.weight$"), r"\1.down_proj"),
    (re.compile(rf"(.*\.experts)\.\d+\.(gate|up)_proj\.{_LINEAR}$"), r"\1.gate_up_proj.\3"),
    (re.compile(rf"(.*\.experts)\.\d+\.(down)_proj\.{_LINEAR}$"), r"\1.down_proj.\3"),
    (re.compile(rf"(.*)\.(gate|up)_proj\.{_LINEAR}$"), r"\1.gate_up_proj.\3"),
]
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
# An FP8 KV cache's scales, one per attention layer: compressed-tensors' self_attn.k_scale/v_scale,
# ModelOpt's self_attn.k_proj.k_scale/v_proj.v_scale, and the older single kv_scale for both.
_KV_SCALE = re.compile(r"(.*\.self_attn)(?:\.[kv]_proj)?\.(k_scale|v_scale|kv_scale)$")


def _set_kv_scale(model: CausalLM, name: str, tensor: torch.Tensor) -> None:
    layer, which = _KV_SCALE.match(name).groups()
    if tensor.numel() != 1 or not 0 < float(tensor) < float("inf"):
        raise ValueError(f"checkpoint tensor {name} must be one positive scale, got {tensor.flatten()[:4].tolist()}")
    for attribute in ("k_scale", "v_scale") if which == "kv_scale" else (which,):
        setattr(model.get_submodule(layer), attribute, float(tensor))


def load_weights(model: CausalLM, path: Path) -> None:
    """Copy each checkpoint tensor, or this rank's slice of it, into its place in our layout."""
    load_tensors(model, _tensors(path, model.config, model.tp))


def load_tensors(model: nn.Module, tensors: Iterator[tuple[str, torch.Tensor]]) -> None:
    """``load_weights`` from checkpoint (name, tensor) pairs, into any module with CausalLM's names, ``config``
    and ``tp``; every parameter must be filled."""
    params = dict(model.named_parameters())
    loaded = dict.fromkeys(params, 0)  # checkpoint tensors written into each parameter
    for name, tensor in tensors:
        if model.config.head == "none" and not name.startswith("model."):
            name = f"model.{name}"  # a bare `*Model` checkpoint names its decoder's tensors without the prefix
        if _KV_SCALE.match(name):
            _set_kv_scale(model, name, tensor)
            continue
        if "rotary_emb" in name or (name == "lm_head.weight" and model.config.tie_word_embeddings):
            continue
        target, which = _target(name, params)
        if target not in params:
            raise ValueError(f"checkpoint tensor {name} has no place in {model.config.architecture}")
        param = params[target]
        part = _part(param.data, name, which, model.config, model.tp.size)
        if target.endswith(".perm") and loaded[target] and not torch.equal(part, tensor):
            raise ValueError(f"checkpoint tensor {name}: its act-order differs from the other projections' "
                             "of the same input, which share one layer here")
        _copy_shard(name, tensor, part, getattr(param, "tp_dim", None), model.tp)
        loaded[target] += 1
    missing = [name for name, param in params.items() if loaded[name] < _parts(name, param)]
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {', '.join(missing[:3])}")


def _copy_shard(name: str, tensor: torch.Tensor, part: torch.Tensor, dim: int | None, tp: TensorParallel) -> None:
    """`part` holds rows (dim 0) or columns (dim 1) [rank * n, (rank + 1) * n) of the tensor; the
    vocabulary's last slice may run past its end, and those padding rows stay as they are."""
    if dim is not None and tp.size > 1:
        n, full = part.shape[dim], tensor.shape[dim]
        start = tp.rank * n
        if -(-full // tp.size) != n:
            raise ValueError(f"checkpoint tensor {name} has {full} rows along dimension {dim}, expected "
                             f"{n * tp.size} (split over {tp.size} ranks)")
        tensor = tensor.narrow(dim, start, max(min(n, full - start), 0))
        part = part.narrow(dim, 0, tensor.shape[dim])
    if part.shape != tensor.shape:
        raise ValueError(f"checkpoint tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(part.shape)}")
    part.copy_(tensor)


def _target(name: str, params: Container[str] | None = None) -> tuple[str, str | None]:
    """Our parameter for a checkpoint tensor, and which part of a fused one it fills: the first rule's
    that names one of ``params`` (an fp8 expert's ``weight`` goes into a plain stack, or into a quantized
    stack's ``weight``), or the first rule's when ``params`` is not given."""
    for pattern, replacement in _RENAMES:
        name = pattern.sub(replacement, name)
    for pattern, replacement in _FUSED:
        match = pattern.match(name)
        if match and (params is None or pattern.sub(replacement, name) in params):
            return pattern.sub(replacement, name), match.group(2)
    return name, None


def _part(data: torch.Tensor, name: str, which: str | None, config: ModelConfig, tp_size: int) -> torch.Tensor:
    """The part of a parameter that checkpoint tensor ``name`` fills (on this rank)."""
    expert = _EXPERT.search(name)
    if expert:
        data = data[int(expert.group(1))]
    if which is None or which == "down" or name.endswith(".perm"):  # an act-order perm: the input's, shared
        return data
    if which in ("gate", "up"):  # this rank's gate rows, then its up rows
        return data.chunk(2)[which == "up"]
    return data[_qkv_rows(which, config, tp_size, data.shape[0])]


def _parts(param_name: str, param: torch.Tensor) -> int:
    """How many checkpoint tensors fill a parameter."""
    if ".qkv_proj." in param_name:
        return 3
    if ".experts.gate_up_proj" in param_name or param_name.endswith(".experts.gate_up_bias"):
        return 2 * param.shape[0]  # plain, or one of a quantized stack's tensors
    if ".experts.down_proj" in param_name or param_name.endswith(".experts.down_bias"):
        return param.shape[0]
    return 2 if ".gate_up_proj." in param_name else 1


def _qkv_rows(which: str, config: ModelConfig, tp_size: int, rows: int) -> slice:
    """Where one rank's slice of q, k or v sits in its fused parameter of ``rows`` rows: one per output,
    or, for fp8 block scales, one per block of outputs."""
    # Qwen3-Next's and Qwen3.5's attention projects a gate beside each query head: q_proj is twice as wide.
    q_width = 2 if config.qwen_hybrid else 1
    q, kv = q_width * config.num_heads * config.head_dim // tp_size, config.num_kv_heads * config.head_dim // tp_size
    start, size = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[which]
    block = (q + 2 * kv) // rows
    if start % block or size % block:
        raise ValueError(f"the {which} projection does not fill whole blocks of {block} rows of scales")
    return slice(start // block, (start + size) // block)


def _tensors(path: Path, config: ModelConfig, tp: TensorParallel) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's tensors, a quantized layer's as their canonical layout, gpt-oss's and Granite's experts
    one by one."""
    if config.architecture == "GptOssForCausalLM":
        return gpt_oss_tensors(_checkpoint_tensors(path), keeps_mxfp4(config, tp))
    if config.architecture == "GraniteMoeHybridForCausalLM":
        return granite_tensors(_checkpoint_tensors(path), config)
    if config.mla is not None:
        return _decoder_layers_only(_checkpoint_tensors(path), config.num_layers)
    if config.quantization is None:
        return _checkpoint_tensors(path)
    layout = config.quantization.layout
    return canonical_tensors(_checkpoint_tensors(path), quantized_layers(path, layout), layout)


_LAYER_INDEX = re.compile(r"^model\.layers\.(\d+)\.")


def _decoder_layers_only(tensors: Iterator[tuple[str, torch.Tensor]],
                         num_layers: int) -> Iterator[tuple[str, torch.Tensor]]:
    """DeepSeek-V3's checkpoints carry multi-token prediction layers after the decoder's (``model.layers.61`` of
    61): a speculative-decoding head that generating token by token does not use."""
    for name, tensor in tensors:
        match = _LAYER_INDEX.match(name)
        if match is None or int(match.group(1)) < num_layers:
            yield name, tensor


def _checkpoint_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    for file in safetensors_files(path):
        with safe_open(str(path / file), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)
