"""Find a checkpoint, build our model for it, and read its safetensors straight into our layout."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open

from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import SINGLE, TensorParallel
from bulkinfer.models.checkpoint import ModelNotFoundError
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.llama import CausalLM


def read_config(path: Path) -> tuple[ModelConfig, dict]:
    hf = json.loads((path / "config.json").read_text())
    return ModelConfig.from_hf(hf), hf


def load_model(path: Path, config: ModelConfig, dtype: torch.dtype, device: torch.device,
               ops: KernelOps, max_position: int, tp: TensorParallel = SINGLE) -> CausalLM:
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = CausalLM(config, ops, max_position, tp)
    finally:
        torch.set_default_dtype(default_dtype)
    load_weights(model, path)
    # Inference only: no parameter keeps autograd state (a CUDA graph's pool would keep activations).
    return model.eval().requires_grad_(False)


# Checkpoint tensor name -> (our fused parameter, which part of it).
_FUSED = [
    (re.compile(r"(.*)\.self_attn\.([qkv])_proj\.(weight|bias)$"), r"\1.self_attn.qkv_proj.\3"),
    (re.compile(r"(.*)\.mlp\.(gate|up)_proj\.weight$"), r"\1.mlp.gate_up_proj.weight"),
]


def load_weights(model: CausalLM, path: Path) -> None:
    """Copy each checkpoint tensor, or this rank's slice of it, into its place in our layout."""
    params = dict(model.named_parameters())
    loaded = dict.fromkeys(params, 0)  # checkpoint tensors written into each parameter
    for name, tensor in _checkpoint_tensors(path):
        if "rotary_emb" in name or (name == "lm_head.weight" and model.config.tie_word_embeddings):
            continue
        target, which = _target(name)
        if target not in params:
            raise ValueError(f"checkpoint tensor {name} has no place in {model.config.architecture}")
        param = params[target]
        part = param.data if which is None else param.data[_fused_rows(which, model.config, model.tp.size)]
        _copy_shard(name, tensor, part, getattr(param, "tp_dim", None), model.tp)
        loaded[target] += 1
    missing = [name for name, param in params.items() if loaded[name] < _parts(name)]
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


def _target(name: str) -> tuple[str, str | None]:
    """Our parameter for a checkpoint tensor, and which part of a fused one it fills."""
    for pattern, replacement in _FUSED:
        match = pattern.match(name)
        if match:
            return pattern.sub(replacement, name), match.group(2)
    return name, None


def _parts(param_name: str) -> int:
    """How many checkpoint tensors fill a parameter."""
    if ".qkv_proj." in param_name:
        return 3
    return 2 if ".gate_up_proj." in param_name else 1


def _fused_rows(which: str, config: ModelConfig, tp_size: int) -> slice:
    """Where one rank's slice of q, k, v, gate or up sits in its fused parameter."""
    q, kv = config.num_heads * config.head_dim // tp_size, config.num_kv_heads * config.head_dim // tp_size
    inter = config.intermediate_size // tp_size
    starts = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv), "gate": (0, inter), "up": (inter, inter)}
    start, size = starts[which]
    return slice(start, start + size)


def _checkpoint_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"{path}: no *.safetensors weights found")
    for file in files:
        with safe_open(str(path / file), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)
