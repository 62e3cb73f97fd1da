"""What a checkpoint's weights will take in memory, from its config and its safetensors headers without reading
a weight: their format and bytes, so a user sees what fits."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from bulkinfer.models.checkpoint import safetensors_files
from bulkinfer.models.config import ModelConfig


@dataclass(frozen=True)
class Footprint:
    weight_format: str  # e.g. "bfloat16", or "gptq: int4 weight-only, groups of 128"
    weight_bytes: int  # in memory: quantized layers stay as stored; gpt-oss's MXFP4 experts are dequantized


def footprint(path: Path, config: ModelConfig) -> Footprint:
    plain = str(config.torch_dtype).removeprefix("torch.")
    weight_format = config.quantization.describe() if config.quantization else plain
    if config.mxfp4_experts:
        weight_format = f"{plain} (MXFP4 experts dequantized at load)"
    return Footprint(weight_format, sum(_loaded_bytes(path / file, config) for file in safetensors_files(path)))


def _loaded_bytes(file: Path, config: ModelConfig) -> int:
    """The bytes a safetensors file's tensors take once loaded, from its header (8 bytes of length, then JSON):
    as stored, but an MXFP4 weight's blocks (two values a byte) in the model's dtype, its scales folded in."""
    with file.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    element = config.torch_dtype.itemsize
    total = 0
    for name, entry in header.items():
        if name == "__metadata__" or (config.mxfp4_experts and name.endswith("_scales")):
            continue
        start, end = entry["data_offsets"]
        total += (end - start) * (2 * element if config.mxfp4_experts and name.endswith("_blocks") else 1)
    return total
