"""FP8 (e4m3) storage for the KV cache: what one byte per element means, for every attention path.

A stored element is ``clamp(x / scale, -448, 448)`` rounded to float8_e4m3fn (nearest, ties to
even), with one float32 scale per layer for keys and one for values; reading it back is
``stored * scale``. The PyTorch paths use torch's float8_e4m3fn dtype.

The Triton kernels see the same bytes as uint8 and convert them with integer operations:
Triton has no e4m3 type before sm_89 (A100, A10), and the interpreter runs the same code, so one
kernel serves every GPU and the tests. Reading costs a few integer operations per element and
is exact: ``e4m3_to_fp16`` gives the value divided by 256 (every e4m3 value, subnormals
included, is then a normal or subnormal fp16), and launchers fold the 256 into the layer's scale.
"""

from __future__ import annotations

import torch

from ._triton import jit, tl

FP8_E4M3 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3fn value; larger values saturate instead of becoming NaN
FP16_SHIFT = 256.0  # what e4m3_to_fp16 divides by, for launchers to fold into the scale


def is_fp8(cache: torch.Tensor) -> bool:
    return cache.dtype == FP8_E4M3


def quantize(x: torch.Tensor, scale: float) -> torch.Tensor:
    """x / scale as e4m3, saturated at +-448."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_E4M3)


def e4m3_as_fp16(values: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn values / 256 as float16, exactly: the PyTorch twin of :func:`e4m3_to_fp16`. On the CPU,
    torch's own conversion runs at about 10 ns a value; this takes a third of that."""
    bits = values.view(torch.uint8).to(torch.int16)
    return (((bits & 0x80) << 8) | ((bits & 0x7F) << 7)).view(torch.float16)


def read_rows(rows: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """Cache rows as values of ``dtype``: fp8 rows dequantized with the layer's scale, others cast."""
    if is_fp8(rows):
        return (rows.float() * scale).to(dtype)
    return rows.to(dtype)


def kernel_view(cache: torch.Tensor) -> torch.Tensor:
    """The tensor a Triton kernel takes for a cache: its bytes for fp8 (see the module's docstring)."""
    return cache.view(torch.uint8) if is_fp8(cache) else cache


@jit
def e4m3_bits(x):
    """fp32 -> the uint8 bits of clamp(x, -448, 448) as e4m3fn, rounded to nearest even."""
    x = tl.minimum(tl.maximum(x, -448.0), 448.0)  # FP8_MAX: a jit function reads no global float
    a = tl.abs(x)
    bits = a.to(tl.uint32, bitcast=True)
    # From 2^-6 up: keep 3 of fp32's 23 mantissa bits, rounding to nearest even (a carry rolls into
    # the exponent), and move the exponent's bias from 127 to 7.
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) >> 20) - (120 << 3)
    # Below 2^-6: multiples of 2^-9, rounded to nearest even by fp32's own addition of 2^23.
    subnormal = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.uint32)
    magnitude = tl.where(a < 0.015625, subnormal, normal)
    sign = (x.to(tl.uint32, bitcast=True) >> 31) << 7
    return (magnitude | sign).to(tl.uint8)


@jit
def e4m3_to_fp16(bits):
    """uint8 e4m3fn bits -> their value / 256 as fp16, exactly.

    e4m3's exponent and mantissa bits, moved to fp16's positions, read as fp16 with a bias of 15
    instead of 7: the value over 2^8, for normal and subnormal numbers alike.
    """
    wide = bits.to(tl.int16)
    return (((wide & 0x7F) << 7) | ((wide & 0x80) << 8)).to(tl.float16, bitcast=True)
