"""MXFP4 weights, the format gpt-oss ships its experts in: 4-bit floats sharing a power-of-two scale per 32.

A weight [..., N, K] is stored as two tensors:

- ``blocks`` uint8 [..., N, K // 32, 16]: 32 e2m1 values per group, two per byte, the even
  element in the low nibble. An e2m1 nibble is sign, two exponent bits and one mantissa bit:
  0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives;
- ``scales`` uint8 [..., N, K // 32]: e8m0 exponents, the group's scale being 2**(e - 127).

Here is the dequantization (the reference, and the CPU path: a layer at a time into the compute
dtype) and the Triton tile loader the fused MoE kernel dequantizes expert weights with.
"""

from __future__ import annotations

import torch

from ._triton import jit, tl

GROUP = 32  # values sharing one scale
E8M0_BIAS = 127
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
# What a dequantized tile loads per weight element, counted for the pipeline's shared memory: its
# byte and its exponent, each lane loading its own.
TILE_BYTES_PER_WEIGHT = 1 + 1


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``blocks`` [..., G, 16] and ``scales`` [..., G] -> the weight [..., G * 32] in ``dtype``,
    computed in fp32 and rounded once."""
    if blocks.shape[-1] != GROUP // 2 or blocks.shape[:-1] != scales.shape:
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)} do not match: "
                         f"expected [..., G, {GROUP // 2}] and [..., G]")
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=blocks.device)
    nibbles = torch.stack([blocks & 0x0F, blocks >> 4], dim=-1).long()  # [..., G, 16, 2]: low nibble first
    values = table[nibbles].flatten(-2)  # [..., G, 32]
    weight = torch.ldexp(values, scales.to(torch.int32)[..., None] - E8M0_BIAS)
    return weight.flatten(-2).to(dtype)


# --- Triton ----------------------------------------------------------------------------------------


@jit
def mxfp4_weight_tile(blocks_ptr, scales_ptr, blocks_stride, scales_stride, cols, depth, in_k, in_n,
                      DTYPE: tl.constexpr):
    """The dequantized tile ``W[cols, depth].T`` [BLOCK_K, BLOCK_N] in DTYPE (zero where masked).

    ``blocks_ptr`` points at row 0 of one weight's bytes (a row is K // 2 bytes), ``scales_ptr`` at
    its exponents; ``depth`` are absolute K indices. Both lanes of a byte read it, and a scale is
    read by its 32 lanes: repeated addresses that the cache serves.
    """
    mask = in_k[:, None] & in_n[None, :]
    cols64 = cols.to(tl.int64)[None, :]
    byte = tl.load(blocks_ptr + cols64 * blocks_stride + (depth // 2)[:, None], mask=mask, other=0).to(tl.int32)
    nibble = (byte >> ((depth % 2) * 4)[:, None]) & 0xF
    exponent = (nibble >> 1) & 3
    mantissa = nibble & 1
    magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.5,
                         ((2 + mantissa) << exponent).to(tl.float32) * 0.25)  # (1 + m/2) * 2**(e - 1)
    value = tl.where((nibble & 8) != 0, -magnitude, magnitude)
    e8m0 = tl.load(scales_ptr + cols64 * scales_stride + (depth // 32)[:, None], mask=mask, other=127)  # 127: scale 1
    e8m0 = e8m0.to(tl.int32)
    # 2**(e - 127) built from its bits, exact: e in the fp32 exponent field, and e = 0 the subnormal 2**-127.
    scale = tl.where(e8m0 == 0, 1 << 22, e8m0 << 23).to(tl.float32, bitcast=True)
    return (value * scale).to(DTYPE)
