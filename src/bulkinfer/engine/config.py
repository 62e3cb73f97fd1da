"""Engine settings, resolved once from the user's arguments and the model's config."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.models.config import ModelConfig

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class EngineConfig:
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_kv_blocks: int | None  # None: sized from memory by the model runner
    kv_cache_memory_gb: float  # the CPU pool's byte budget
    gpu_memory_utilization: float  # the fraction of GPU memory the model and the pool may use
    enable_prefix_caching: bool
    enforce_eager: bool  # no CUDA graphs for decode steps
    attention_backend: str
    seed: int
    tensor_parallel_size: int = 1  # processes the model is split across, one per GPU


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for, but no CUDA GPU is available")
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    return resolved


def resolve_dtype(dtype: str | torch.dtype, model: ModelConfig, device: torch.device) -> torch.dtype:
    """"auto": float32 on the CPU; on a GPU the checkpoint's half type, bfloat16 for fp32 ones."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cpu":
            return torch.float32
        return model.torch_dtype if model.torch_dtype != torch.float32 else torch.bfloat16
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {', '.join(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def resolve_max_model_len(requested: int | None, model: ModelConfig) -> int:
    # A sliding window we do not implement would change results past it, so lengths stop there.
    limit = min(model.max_position_embeddings, model.sliding_window or model.max_position_embeddings)
    if requested is None:
        return limit
    if not 1 <= requested <= limit:
        raise ValueError(f"max_model_len must be between 1 and {limit} for this model, got {requested}")
    return requested


def check_positive(**values: int | None) -> None:
    for name, value in values.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
