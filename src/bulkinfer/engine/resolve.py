"""The engine's options made concrete for one model on this machine: a device, a dtype, lengths."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.engine.compute_dtype import ComputeDtype, choose_dtype, cpu_flags
from bulkinfer.engine.config import BATCHED_TOKENS, EngineConfig
from bulkinfer.layers.gated_delta_net import GatedDeltaNetShape
from bulkinfer.layers.mamba2 import Mamba2Shape
from bulkinfer.models.config import ModelConfig


@dataclass(frozen=True)
class ResolvedConfig:
    options: EngineConfig  # as the user gave them
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    max_num_batched_tokens: int
    dtype_reason: str = "as asked"  # why this dtype: "auto: this CPU has AVX512-BF16 and AMX", ...

    @property
    def kv_cache_dtype(self) -> torch.dtype:
        """What the KV cache stores: the compute dtype, or one byte of e4m3 per element."""
        return torch.float8_e4m3fn if self.options.kv_cache_dtype == "fp8_e4m3" else self.dtype


def resolve(options: EngineConfig, model: ModelConfig) -> ResolvedConfig:
    if model.implementation == "transformers":
        check_transformers_path(options, model)
    if model.mla is not None:
        check_latent_attention(options, model)
    if options.deterministic and _scanned_state(model):
        raise ValueError(f"deterministic=True does not run with {_scanned_state(model)} layers ({model.architecture}): "
                         "their CPU scan is not batch-invariant")
    if model.quantization is not None and model.quantization.layout.format.act_order \
            and options.tensor_parallel_size > 1:
        raise ValueError(f"tensor_parallel_size > 1 with act-order weights ({model.quantization.describe()}): the "
                         "order spans every input column, so row-parallel layers cannot split them")
    device = resolve_device(options.device)
    compute = resolve_dtype(options.dtype, model, device)
    return ResolvedConfig(options, device, compute.dtype, resolve_max_model_len(options.max_model_len, model),
                          options.max_num_batched_tokens or BATCHED_TOKENS[device.type], compute.reason)


def _scanned_state(model: ModelConfig) -> str:
    """The kind of a hybrid's recurrent layers whose state a scan carries ("" for none): a scan's rounding
    depends on where a step cuts the prompt and on how many sequences share the step's elementwise passes.
    LFM2's short convolutions keep only their inputs, so they stay exact."""
    mixer = model.hybrid.mixer if model.hybrid is not None else None
    return {Mamba2Shape: "Mamba2", GatedDeltaNetShape: "gated delta-net"}.get(type(mixer), "")


def _asked(options: EngineConfig) -> dict[str, bool]:
    """The options some model code cannot honour, by how an error names them, and whether they are asked for."""
    return {"tensor_parallel_size > 1": options.tensor_parallel_size > 1,
            "deterministic=True": options.deterministic,
            "LoRA adapters (enable_lora)": options.enable_lora,
            "kv_cache_dtype='fp8_e4m3'": options.kv_cache_dtype == "fp8_e4m3"}


def check_transformers_path(options: EngineConfig, model: ModelConfig) -> None:
    """What only bulkinfer's own model code does: splitting a model over ranks, batch-invariant matmuls,
    LoRA adapters."""
    asked = _asked(options)
    for option in ("tensor_parallel_size > 1", "deterministic=True", "LoRA adapters (enable_lora)"):
        if asked[option]:
            raise ValueError(f"{option} needs bulkinfer's native code, and {model.architecture} runs through "
                             "transformers (model_impl='transformers')")


def check_latent_attention(options: EngineConfig, model: ModelConfig) -> None:
    """What multi-head latent attention does not do: an FP8 cache (its decode kernel reads rows of the model's
    dtype), batch-invariant decode (its absorbed decode batches sequences), LoRA adapters (no adapter slots on
    its projections)."""
    asked = _asked(options)
    for option in ("kv_cache_dtype='fp8_e4m3'", "deterministic=True", "LoRA adapters (enable_lora)"):
        if asked[option]:
            raise ValueError(f"{option} does not run with multi-head latent attention ({model.architecture})")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for, but no CUDA GPU is available")
    return resolved


def resolve_dtype(dtype: str, model: ModelConfig, device: torch.device) -> ComputeDtype:
    """The dtype setting made concrete for this checkpoint on this machine (see compute_dtype.py)."""
    return choose_dtype(dtype, model.torch_dtype, device, cpu_flags() if device.type == "cpu" else frozenset())


def resolve_max_model_len(requested: int | None, model: ModelConfig) -> int:
    # A sliding window we do not implement would change results past it, so lengths stop there.
    limit = min(model.max_position_embeddings, model.sliding_window or model.max_position_embeddings)
    if requested is None:
        return limit
    if requested > limit:
        raise ValueError(f"max_model_len must be between 1 and {limit} for this model, got {requested}")
    return requested
