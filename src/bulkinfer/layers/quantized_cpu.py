"""torch's CPU kernels for integer weights, where they beat dequantizing the layer.

``_weight_int4pack_mm_for_cpu`` (4-bit, groups of 32 to 256) and ``_weight_int8pack_mm`` (8-bit,
symmetric, a scale per output row) multiply straight from the integers. Measured on a random:50m
projection (docs/benchmarks.md), they are many times faster than dequantizing for a few rows in
half precision, break even near 64 rows and lose at prefill sizes; in float32 they lose from 16
rows on. So they run for half-precision inputs of up to ``PACKED_MAX_ROWS`` rows (decode steps),
and the layer dequantizes otherwise.

Each kernel wants its own copy of the integers, made at the first call and kept: the CPU holds
the packed integers twice (still a quarter of a bfloat16 layer's bytes for int4).
"""

from __future__ import annotations

import torch

from bulkinfer.kernels.int_weight_gemm import unpack_int_weight
from bulkinfer.layers.quantized_weights import WeightFormat

PACKED_MAX_ROWS = 32
_INT4_GROUPS = (32, 64, 128, 256)


def packed_kernel_runs(x: torch.Tensor, fmt: WeightFormat) -> bool:
    """Whether :func:`packed_matmul` takes this input and format."""
    if x.device.type != "cpu" or x.dtype not in (torch.bfloat16, torch.float16) or x.shape[0] > PACKED_MAX_ROWS:
        return False
    if fmt.bits == 4:
        return fmt.group_size in _INT4_GROUPS
    return fmt.symmetric and fmt.group_size is None


def packed_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                  fmt: WeightFormat) -> torch.Tensor:
    """x [T, K] (already in the weight's column order) @ W.T -> [T, N], W as in dequantize_int_weight."""
    packed = _packed(qweight, scales, zeros, fmt, x.dtype)
    if fmt.bits == 4:
        return torch._weight_int4pack_mm_for_cpu(x, packed[0], fmt.group_size, packed[1])
    return torch._weight_int8pack_mm(x, packed[0], packed[1])


def _packed(qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, fmt: WeightFormat,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's (weight, scales) for this layer, made once per dtype and kept on ``qweight``."""
    cached = getattr(qweight, "_cpu_packed", None)
    if cached is None or cached[0] != dtype:
        q = unpack_int_weight(qweight, fmt.bits)
        if fmt.bits == 4:
            cached = dtype, _int4_operands(q, scales, zeros, dtype)
        else:  # symmetric: the unsigned value minus 128 is the signed byte with its top bit flipped
            cached = dtype, ((q ^ 0x80).view(torch.int8), scales[:, 0].to(dtype))
        qweight._cpu_packed = cached
    return cached[1]


def _int4_operands(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The int4 kernel computes (q - 8) * s + m per group: (q - z) * s is that with m = (8 - z) * s."""
    weight = torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
    zero = 8.0 if zeros is None else zeros.float()
    offset = (8.0 - zero) * scales.float()
    return weight, torch.stack((scales.float(), offset.expand_as(scales)), dim=-1).transpose(0, 1).to(dtype).contiguous()
