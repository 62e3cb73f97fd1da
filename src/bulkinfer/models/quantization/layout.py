"""What every on-disk layout of a quantized linear layer tells the loader, and the repacking they share."""

from __future__ import annotations

from typing import Protocol

import torch

from bulkinfer.kernels.int_weight_gemm import pack_int_weight
from bulkinfer.layers.quantized_weights import WeightFormat


class CheckpointLayout(Protocol):
    """A format's tensors for one linear layer -> the canonical ones (``qweight``, ``scales``, ``zeros``,
    ``perm``; or ``weight``, ``weight_scale``), keyed by their suffix after the layer's name. ``marker``
    is the suffix only a quantized layer has, so a checkpoint's tensor names say which layers are."""

    format: WeightFormat
    marker: str

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...


def int_canonical(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, g_idx: torch.Tensor | None,
                  fmt: WeightFormat) -> dict[str, torch.Tensor]:
    """Unsigned values q [N, K], scales [N, G], zeros [N, G] (or None) and GPTQ's g_idx [K] (or None)
    -> the canonical integer tensors. Zeros equal to 2 ** (bits - 1) everywhere are dropped for a
    symmetric format; act-order columns are sorted by group, keeping the permutation."""
    out = {"scales": scales}
    if fmt.symmetric:
        if zeros is not None and not torch.all(zeros == 2 ** (fmt.bits - 1)):
            raise ValueError("a symmetric checkpoint has zero points other than 2 ** (bits - 1)")
    else:
        if zeros is None or zeros.min() < 0 or zeros.max() > 255:
            raise ValueError("an asymmetric checkpoint lacks zero points, or has some out of range")
        out["zeros"] = zeros.to(torch.uint8)
    group = q.shape[1] // scales.shape[1]
    in_order = torch.arange(q.shape[1], device=q.device) // group
    if fmt.act_order:
        perm = torch.argsort(g_idx.to(torch.int64), stable=True)
        if not torch.equal(g_idx.to(torch.int64)[perm], in_order):
            raise ValueError(f"g_idx does not give each group {group} input columns")
        q, out["perm"] = q[:, perm], perm
    elif g_idx is not None and not torch.equal(g_idx.to(torch.int64), in_order):
        raise ValueError("g_idx reorders the input columns, but the config does not say desc_act/actorder")
    out["qweight"] = pack_int_weight(q, fmt.bits)
    return out

