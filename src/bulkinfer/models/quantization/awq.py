"""AWQ checkpoints (AutoAWQ's GEMM layout): 4-bit integers packed along the output dimension in the
interleaved order 0, 2, 4, 6, 1, 3, 5, 7: ``qweight`` int32 [K, N / 8]; ``qzeros`` int32
[K / group, N / 8] likewise; ``scales`` [K / group, N]. W[k, n] = (q[k, n] - z[k / group, n]) * s[...]."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.kernels.int_weight_gemm import unpack_int_weight
from bulkinfer.layers.quantized_weights import WeightFormat
from bulkinfer.models.quantization.layout import int_canonical
from bulkinfer.models.refusal import UnsupportedModelError

# Nibble i of a word holds output column _PACK_ORDER[i] of its eight; _UNPACK_ORDER inverts that.
_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
_UNPACK_ORDER = tuple(_PACK_ORDER.index(column) for column in range(8))


@dataclass(frozen=True)
class AwqLayout:
    format: WeightFormat
    marker: str = "qweight"

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        q = _unpack_columns(tensors["qweight"]).t()  # [N, K]
        zeros = _unpack_columns(tensors["qzeros"]).t() if "qzeros" in tensors else None
        return int_canonical(q, tensors["scales"].t(), zeros, None, self.format)


def _unpack_columns(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, C / 8] -> [R, C] in column order."""
    nibbles = unpack_int_weight(packed, 4).view(packed.shape[0], -1, 8)
    return nibbles[..., list(_UNPACK_ORDER)].reshape(packed.shape[0], -1)


def awq_layout(qc: dict) -> AwqLayout:
    bits, version = qc.get("bits", qc.get("w_bit")), str(qc.get("version", "gemm")).lower()
    if bits != 4 or version != "gemm":
        raise UnsupportedModelError(f"AWQ with {bits} bits in the {version!r} layout: bulkinfer runs 4-bit AWQ "
                                    "in the GEMM layout")
    group = qc.get("group_size", qc.get("q_group_size", 128))
    return AwqLayout(WeightFormat("int", 4, None if group in (-1, None) else int(group), not qc.get("zero_point", True)))
