"""A quantized copy of a random checkpoint, for benchmarking a format against the unquantized model.

Written in compressed-tensors' layout (what llm-compressor writes and bulkinfer reads): every
decoder projection quantized with min-max symmetric scales, embeddings and the LM head plain.

- ``fp8``: float-quantized, float8 e4m3 weights with a scale per output row, activations
  quantized per token when the layer runs (llm-compressor's FP8_DYNAMIC);
- ``w4a16``: pack-quantized 4-bit integers in groups of 128 input columns (32 where a layer's
  width is not a multiple of 128), weight-only;
- ``w8a16``: pack-quantized 8-bit integers with a scale per output row, weight-only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bulkinfer.bench import QUANTIZATIONS
from bulkinfer.kernels.int_weight_gemm import pack_int_weight
from bulkinfer.models.checkpoint import safetensors_files

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_FP8_MAX = 448.0  # e4m3's largest finite value


def quantized_checkpoint(path: Path, quantization: str) -> Path:
    """``path``'s model quantized as ``quantization``, written once beside it (``PATH-QUANTIZATION``)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose from {', '.join(QUANTIZATIONS)}")
    out = path.with_name(f"{path.name}-{quantization}")
    if (out / "config.json").is_file():
        return out
    tensors = {name: t for file in safetensors_files(path) for name, t in load_file(path / file).items()}
    projections = {name: t for name, t in tensors.items() if _is_projection(name)}
    group = 128 if all(t.shape[1] % 128 == 0 for t in projections.values()) else 32
    quantized = {name: t for name, t in tensors.items() if name not in projections}
    for name, weight in projections.items():
        layer = name.removesuffix(".weight")
        quantized |= {f"{layer}.{suffix}": t for suffix, t in _quantize(weight.float(), quantization, group).items()}
    partial = out.with_name(out.name + ".partial")  # renamed into place when whole
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(path, partial, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    save_file(quantized, partial / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"] = _config(quantization, group)
    (partial / "config.json").write_text(json.dumps(config, indent=2))
    partial.rename(out)
    return out


def _is_projection(name: str) -> bool:
    parts = name.split(".")
    return name.startswith("model.layers.") and parts[-1] == "weight" and parts[-2] in _PROJECTIONS


def _quantize(w: torch.Tensor, quantization: str, group: int) -> dict[str, torch.Tensor]:
    """One projection's tensors in compressed-tensors' names and layout."""
    if quantization == "fp8":
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / _FP8_MAX
        return {"weight": (w / scale).to(torch.float8_e4m3fn), "weight_scale": scale}
    bits = 4 if quantization == "w4a16" else 8
    n, k = w.shape
    grouped = w.view(n, -1, group if bits == 4 else k)
    half = 2 ** (bits - 1)
    scale = grouped.abs().amax(-1).clamp(min=1e-12) / (half - 1)
    q = torch.clamp(torch.round(grouped / scale[..., None]), -half, half - 1) + half  # stored offset by half
    return {"weight_packed": pack_int_weight(q.view(n, k).to(torch.uint8), bits), "weight_scale": scale,
            "weight_shape": torch.tensor([n, k])}


def _config(quantization: str, group: int) -> dict:
    if quantization == "fp8":
        weights = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False}
        inputs = {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True, "dynamic": True}
        scheme = {"format": "float-quantized", "weights": weights, "input_activations": inputs}
    else:
        bits = 4 if quantization == "w4a16" else 8
        weights = {"num_bits": bits, "type": "int", "symmetric": True, "dynamic": False,
                   **({"strategy": "group", "group_size": group} if bits == 4 else {"strategy": "channel"})}
        scheme = {"format": "pack-quantized", "weights": weights, "input_activations": None}
    return {"quant_method": "compressed-tensors", "format": scheme["format"], "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], **scheme}}}
