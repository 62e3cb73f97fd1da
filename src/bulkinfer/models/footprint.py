"""What a checkpoint will take in memory, from its config and its safetensors headers without reading a
weight: the weights' format and bytes, and the KV cache's bytes per token, so a user sees what fits."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from bulkinfer.models.checkpoint import safetensors_files
from bulkinfer.models.config import ModelConfig


@dataclass(frozen=True)
class Footprint:
    weight_format: str  # e.g. "bfloat16", or "gptq: int4 weight-only, groups of 128"
    weight_bytes: int  # as stored: quantized layers stay so in memory
    kv_bytes_per_token: int  # keys and values of every layer
    kv_dtype: torch.dtype


def footprint(path: Path, config: ModelConfig, kv_dtype: torch.dtype | None = None) -> Footprint:
    """``kv_dtype``: the cache's element type; by default the checkpoint's (as on a GPU)."""
    kv_dtype = kv_dtype or config.torch_dtype
    plain = str(config.torch_dtype).removeprefix("torch.")
    weight_format = config.quantization.describe() if config.quantization else plain
    return Footprint(weight_format, sum(_stored_bytes(path / file) for file in safetensors_files(path)),
                     kv_bytes_per_token(config, kv_dtype), kv_dtype)


def kv_bytes_per_token(config: ModelConfig, kv_dtype: torch.dtype) -> int:
    """The keys and values one token keeps in every layer's cache."""
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * kv_dtype.itemsize


def _stored_bytes(file: Path) -> int:
    """The bytes of a safetensors file's tensors, from its header (8 bytes of length, then JSON)."""
    with file.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(end - start for name, entry in header.items() if name != "__metadata__"
               for start, end in [entry["data_offsets"]])
