"""``quant_method: fp8``, as Qwen3-FP8 and DeepSeek-V3 ship it: float8_e4m3fn weights with a float32
scale per block of ``weight_block_size`` (usually 128 x 128) in ``weight_scale_inv`` (despite its
name, the multiplier: W = weight * weight_scale_inv), activations quantized when the layer runs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.layers.quantized_weights import WeightFormat
from bulkinfer.models.refusal import UnsupportedModelError


@dataclass(frozen=True)
class Fp8BlockLayout:
    format: WeightFormat
    marker: str = "weight_scale_inv"

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"weight": tensors["weight"], "weight_scale": tensors["weight_scale_inv"].float()}


def fp8_layout(qc: dict) -> Fp8BlockLayout:
    if qc.get("activation_scheme", "dynamic") != "dynamic":
        raise UnsupportedModelError(f"quant_method fp8 with activation_scheme {qc['activation_scheme']!r}: "
                                    "bulkinfer runs fp8 checkpoints with dynamic activation scales only")
    if qc.get("fmt", "e4m3") != "e4m3":
        raise UnsupportedModelError(f"quant_method fp8 with fmt {qc['fmt']!r}: bulkinfer runs e4m3 weights only")
    block = qc.get("weight_block_size")
    if not block or len(block) != 2:
        raise UnsupportedModelError("quant_method fp8 without weight_block_size: bulkinfer runs block-wise fp8 "
                                    "checkpoints (per-tensor fp8 comes as compressed-tensors float-quantized)")
    return Fp8BlockLayout(WeightFormat("fp8", block_size=(int(block[0]), int(block[1]))))
