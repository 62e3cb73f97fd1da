"""GPTQ checkpoints (AutoGPTQ / GPTQModel): 4- or 8-bit integers packed along the input dimension,
``qweight`` int32 [K * bits / 32, N]; ``scales`` [K / group, N]; ``qzeros`` int32 [K / group,
N * bits / 32] packed along the output dimension, each stored one less than it is in the original
("gptq" v1) format; ``g_idx`` [K], the group of each input column, which act-order (``desc_act``)
permutes. W[k, n] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n]."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.kernels.int_weight_gemm import unpack_int_weight
from bulkinfer.layers.quantized_weights import INT_BITS, WeightFormat
from bulkinfer.models.quantization.layout import int_canonical
from bulkinfer.models.refusal import UnsupportedModelError


@dataclass(frozen=True)
class GptqLayout:
    format: WeightFormat
    zero_offset: int  # 1 for the v1 format, whose zeros are stored minus one
    marker: str = "qweight"

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        bits = self.format.bits
        q = unpack_int_weight(tensors["qweight"].t(), bits)  # packed along K: unpacks as [N, K]
        zeros = unpack_int_weight(tensors["qzeros"], bits).t().to(torch.int32) + self.zero_offset
        return int_canonical(q, tensors["scales"].t(), zeros, tensors.get("g_idx"), self.format)


def gptq_layout(qc: dict) -> GptqLayout:
    bits, group = qc.get("bits"), qc.get("group_size", 128)
    if bits not in INT_BITS:
        raise UnsupportedModelError(f"GPTQ with {bits} bits: bulkinfer runs 4- and 8-bit GPTQ checkpoints")
    checkpoint_format = qc.get("checkpoint_format", "gptq")
    if checkpoint_format not in ("gptq", "gptq_v2"):
        raise UnsupportedModelError(f"GPTQ checkpoint_format {checkpoint_format!r}: bulkinfer reads gptq and gptq_v2")
    fmt = WeightFormat("int", bits, None if group in (-1, None) else int(group), bool(qc.get("sym", True)),
                       bool(qc.get("desc_act", False)))
    return GptqLayout(fmt, 1 if checkpoint_format == "gptq" else 0)
