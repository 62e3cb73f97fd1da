"""What a checkpoint's weights will take in memory, from its config and its safetensors headers without reading
a weight: their format and bytes, so a user sees what fits."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from bulkinfer.layers.quantized_weights import MXFP4
from bulkinfer.models.checkpoint import safetensors_files
from bulkinfer.models.config import ModelConfig


@dataclass(frozen=True)
class Footprint:
    weight_format: str  # e.g. "bfloat16", or "gptq: int4 weight-only, groups of 128"
    weight_bytes: int  # in memory on one device: as stored (quantized layers and gpt-oss's MXFP4 experts stay so)


def footprint(path: Path, config: ModelConfig) -> Footprint:
    plain = str(config.torch_dtype).removeprefix("torch.")
    weight_format = config.quantization.describe() if config.quantization else plain
    if config.mxfp4_experts:
        weight_format = f"{plain}, experts {MXFP4.describe()}"
    return Footprint(weight_format, sum(_stored_bytes(path / file) for file in safetensors_files(path)))


def _stored_bytes(file: Path) -> int:
    """The bytes of a safetensors file's tensors, from its header (8 bytes of length, then JSON)."""
    with file.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(entry["data_offsets"][1] - entry["data_offsets"][0] for name, entry in header.items()
               if name != "__metadata__")
