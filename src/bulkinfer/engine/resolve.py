"""The engine's options made concrete for one model on this machine: a device, a dtype, lengths."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from bulkinfer.engine.config import BATCHED_TOKENS, EngineConfig
from bulkinfer.models.config import ModelConfig

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ResolvedConfig:
    options: EngineConfig  # as the user gave them
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    max_num_batched_tokens: int

    @property
    def kv_cache_dtype(self) -> torch.dtype:
        """What the KV cache stores: the compute dtype, or one byte of e4m3 per element."""
        return torch.float8_e4m3fn if self.options.kv_cache_dtype == "fp8_e4m3" else self.dtype


def resolve(options: EngineConfig, model: ModelConfig) -> ResolvedConfig:
    if model.implementation == "transformers":
        check_transformers_path(options, model)
    if model.mla is not None:
        check_latent_attention(options, model)
    if model.quantization is not None and model.quantization.layout.format.act_order \
            and options.tensor_parallel_size > 1:
        raise ValueError(f"tensor_parallel_size > 1 with act-order weights ({model.quantization.describe()}): the "
                         "order spans every input column, so row-parallel layers cannot split them")
    device = resolve_device(options.device)
    return ResolvedConfig(options, device, resolve_dtype(options.dtype, model, device),
                          resolve_max_model_len(options.max_model_len, model),
                          options.max_num_batched_tokens or BATCHED_TOKENS[device.type])


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


def resolve_dtype(dtype: str, model: ModelConfig, device: torch.device) -> torch.dtype:
    """"auto": float32 on the CPU; on a GPU the checkpoint's half type, bfloat16 for fp32 ones.
    bfloat16 becomes float16 on a GPU without it (before Ampere)."""
    if dtype != "auto":
        resolved = _DTYPES[dtype]
    elif device.type == "cpu":
        return torch.float32
    else:
        resolved = model.torch_dtype if model.torch_dtype != torch.float32 else torch.bfloat16
    if resolved == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        logger.warning("this GPU has no bfloat16: running in float16")
        return torch.float16
    return resolved


def resolve_max_model_len(requested: int | None, model: ModelConfig) -> int:
    # A sliding window we do not implement would change results past it, so lengths stop there.
    limit = min(model.max_position_embeddings, model.sliding_window or model.max_position_embeddings)
    if requested is None:
        return limit
    if requested > limit:
        raise ValueError(f"max_model_len must be between 1 and {limit} for this model, got {requested}")
    return requested
