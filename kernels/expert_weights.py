"""Stacked expert weights in the formats the fused MoE kernel reads: dense, FP8, INT4/INT8 and MXFP4.

One projection of every expert, each weight [N, K] (output features, input features), stacked
along a first expert dimension. The kernel dequantizes a tile at a time into the activations'
dtype; :meth:`ExpertWeights.dequantize` is the reference's (and the CPU path's) view of the same
numbers, an expert at a time.

Every format's scales are read as a grid of (block_n x block_k) blocks of the weight:

| format | ``data`` | ``scales`` | block |
|---|---|---|---|
| dense | [E, N, K] float | none | |
| fp8 | [E, N, K] float8_e4m3fn | float32 [E, ceil(N/bn), ceil(K/bk)] | (bn, bk); per channel (1, K); per tensor (N, K) |
| int | int32 [E, N, K * bits // 32], kernels/int_weight_gemm.py's packing | [E, N, K // g] in x's dtype; ``zeros`` uint8 of the same shape, or none | (1, g) |
| mxfp4 | uint8 [E, N, K // 32, 16] | uint8 e8m0 [E, N, K // 32] | (1, 32) |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .fp8_gemm import FP8, block_scales, dequantize_fp8
from .int_weight_gemm import dequantize_int_weight, values_per_word
from .mxfp4 import GROUP, dequantize_mxfp4

FORMATS = ("dense", "fp8", "int", "mxfp4")


@dataclass(frozen=True)
class ExpertWeights:
    """One projection's weights for every expert; build it with :meth:`fp8`, :meth:`int_weight` or :meth:`mxfp4`
    (or pass a plain [E, N, K] tensor where a dense one is meant)."""

    format: str
    data: torch.Tensor
    n: int
    k: int
    scales: torch.Tensor | None = None
    zeros: torch.Tensor | None = None
    block_n: int = 1
    block_k: int = 1
    bits: int = 0  # int only

    @classmethod
    def dense(cls, weight: torch.Tensor) -> ExpertWeights:
        return cls("dense", weight.contiguous(), weight.shape[1], weight.shape[2])

    @classmethod
    def fp8(cls, weight: torch.Tensor, weight_scale: torch.Tensor,
            block_size: tuple[int, int] | None) -> ExpertWeights:
        """``weight`` float8_e4m3fn [E, N, K]; ``weight_scale`` [E] or [E, 1, 1] per tensor, [E, N] or
        [E, N, 1] per channel, or [E, ceil(N/bn), ceil(K/bk)] with ``block_size`` (bn, bk)."""
        if weight.dtype != FP8 or weight.dim() != 3:
            raise ValueError(f"FP8 experts must be {FP8} [E, N, K], got {weight.dtype} {tuple(weight.shape)}")
        grid = block_scales(weight, weight_scale, block_size)
        return cls("fp8", weight, weight.shape[1], weight.shape[2], grid.scales, None, grid.block_n, grid.block_k)

    @classmethod
    def int_weight(cls, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
            bits: int) -> ExpertWeights:
        """``qweight`` int32 [E, N, K * bits // 32], ``scales`` [E, N, K // group_size], ``zeros`` uint8
        [E, N, K // group_size] or None (symmetric)."""
        k = qweight.shape[-1] * values_per_word(bits)
        if scales.dim() != 3 or scales.shape[:2] != qweight.shape[:2] or scales.shape[2] * group_size != k \
                or (zeros is not None and zeros.shape != scales.shape):
            raise ValueError(f"INT{bits} experts {tuple(qweight.shape)} do not match scales {tuple(scales.shape)} "
                             f"in groups of {group_size}")
        return cls("int", qweight, qweight.shape[1], k, scales, zeros, 1, group_size, bits)

    @classmethod
    def mxfp4(cls, blocks: torch.Tensor, scales: torch.Tensor) -> ExpertWeights:
        """``blocks`` uint8 [E, N, K // 32, 16] and ``scales`` uint8 [E, N, K // 32], as gpt-oss ships them."""
        if blocks.dim() != 4 or blocks.shape[:3] != scales.shape:
            raise ValueError(f"MXFP4 experts {tuple(blocks.shape)} do not match scales {tuple(scales.shape)}")
        return cls("mxfp4", blocks, blocks.shape[1], blocks.shape[2] * GROUP, scales, None, 1, GROUP)

    @property
    def num_experts(self) -> int:
        return self.data.shape[0]

    def dequantize(self, expert: int, dtype: torch.dtype) -> torch.Tensor:
        """Expert ``expert``'s weight [N, K] in ``dtype``, the numbers the kernel's tiles hold."""
        if self.format == "dense":
            return self.data[expert].to(dtype)
        if self.format == "fp8":
            return dequantize_fp8(self.data[expert], self.scales[expert], (self.block_n, self.block_k), dtype)
        if self.format == "int":
            zeros = self.zeros[expert] if self.zeros is not None else None
            return dequantize_int_weight(self.data[expert], self.scales[expert], zeros, self.block_k, self.bits,
                                         dtype)
        return dequantize_mxfp4(self.data[expert], self.scales[expert], dtype)

    def experts(self, dtype: torch.dtype) -> Sequence[torch.Tensor]:
        """Every expert's weight in ``dtype``, each dequantized when it is read: ``fused_moe_ref``'s
        ``w13`` or ``w2`` without holding all of them dequantized at once."""
        return _DequantizedExperts(self, dtype)


class _DequantizedExperts(Sequence):
    def __init__(self, weights: ExpertWeights, dtype: torch.dtype):
        self.weights, self.dtype = weights, dtype

    def __len__(self) -> int:
        return self.weights.num_experts

    def __getitem__(self, expert: int) -> torch.Tensor:
        return self.weights.dequantize(expert, self.dtype)


def as_expert_weights(weights: torch.Tensor | ExpertWeights) -> ExpertWeights:
    return weights if isinstance(weights, ExpertWeights) else ExpertWeights.dense(weights)
