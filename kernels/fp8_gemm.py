"""The linear layer of FP8 checkpoints: Qwen3/DeepSeek block FP8 and compressed-tensors FP8.

The weight is float8_e4m3fn [N, K] with float32 scales in one of three shapes:

- per tensor: [1];
- per output channel: [N] (or [N, 1]);
- per block: [ceil(N / bn), ceil(K / bk)] with ``block_size = (bn, bk)`` (128 x 128 in the
  official Qwen3 and DeepSeek releases, whose ``weight_scale_inv`` is this multiplier).

Each shape is read as a block grid: per tensor is one (N, K) block, per channel (1, K) blocks.

Two ways to run it, chosen by the GPU:

- FP8 tensor cores (sm_89 and newer, and the interpreter): activations are quantized to FP8 on the
  fly, one scale per row over each bk-wide group of K (per row over all of K for per-tensor and
  per-channel weights), as DeepSeek-V3 does. The kernel multiplies FP8 by FP8 and applies both
  scales per K group, or once at the end.
- Weight-only (sm_80 and sm_86, which have no FP8 MMA): each weight tile is upcast and scaled into
  the activations' dtype inside the kernel, and the GEMM runs in that dtype. The CPU path
  dequantizes to the same numbers (:func:`dequantize_fp8`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._triton import Launch, jit, next_power_of_2, tl
from .fp8 import FP16_SHIFT, e4m3_as_fp16
from .gemm_tiles import GemmTiles, column_tile, pipeline_stages, row_tile, spread_columns
from .target import KernelTarget, device_target

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3fn value; a cast beyond it gives NaN
_MIN_AMAX = 1e-12  # an all-zero group gets a tiny scale, not a division by zero
# What a dequantized tile loads per weight element, counted for the pipeline's shared memory: its
# byte and its fp32 scale, each lane loading its own.
TILE_BYTES_PER_WEIGHT = 1 + 4


@dataclass(frozen=True)
class BlockScales:
    """Weight scales as a block grid: ``scales[i, j]`` multiplies rows ``i*bn:(i+1)*bn`` and columns
    ``j*bk:(j+1)*bk`` of the weight."""

    scales: torch.Tensor  # float32 [..., ceil(N / bn), ceil(K / bk)]
    block_n: int
    block_k: int


def block_scales(weight: torch.Tensor, weight_scale: torch.Tensor,
                 block_size: tuple[int, int] | None) -> BlockScales:
    """Per-tensor, per-channel or block scales of ``weight`` [..., N, K] as one block grid
    [..., rows, columns] (leading dimensions, such as experts, each have their own scales)."""
    *lead, n, k = weight.shape
    lead, count = tuple(lead), math.prod(lead)
    if block_size is not None:
        bn, bk = block_size
        if tuple(weight_scale.shape) != (*lead, -(-n // bn), -(-k // bk)):
            raise ValueError(f"block scales {tuple(weight_scale.shape)} do not cover a weight {(*lead, n, k)} "
                             f"in blocks of {tuple(block_size)}")
        return BlockScales(weight_scale.float(), bn, bk)
    if tuple(weight_scale.shape[:len(lead)]) == lead and weight_scale.numel() == count:
        return BlockScales(weight_scale.float().reshape(*lead, 1, 1), n, k)
    if tuple(weight_scale.shape[:len(lead)]) == lead and weight_scale.numel() == count * n:
        return BlockScales(weight_scale.float().reshape(*lead, n, 1), 1, k)
    raise ValueError(f"FP8 weight scales {tuple(weight_scale.shape)} are neither per tensor, per channel of "
                     f"{n} rows, nor blocks (no block_size) of a weight {(*lead, n, k)}")


def dequantize_fp8(weight: torch.Tensor, weight_scale: torch.Tensor, block_size: tuple[int, int] | None,
                   dtype: torch.dtype) -> torch.Tensor:
    """The weight [..., N, K] in ``dtype``, computed in fp32 and rounded once, as the weight-only kernel does."""
    blocks = block_scales(weight, weight_scale, block_size)
    n, k = weight.shape[-2:]
    # Expanded only along the dimensions blocks split; a single row or column of scales broadcasts.
    scale = blocks.scales * FP16_SHIFT
    if scale.shape[-2] > 1:
        scale = scale.repeat_interleave(blocks.block_n, -2)[..., :n, :]
    if scale.shape[-1] > 1:
        scale = scale.repeat_interleave(blocks.block_k, -1)[..., :k]
    return (e4m3_as_fp16(weight).float() * scale).to(dtype)


def quantize_fp8_activations(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (FP8 values [M, K], float32 scales [M, ceil(K / group)]), a scale per row and group
    mapping the group's largest magnitude to FP8's largest value."""
    m, k = x.shape
    padded = torch.nn.functional.pad(x.float(), (0, -k % group)).view(m, -1, group)
    scales = padded.abs().amax(-1).clamp_(min=_MIN_AMAX) / FP8_MAX
    values = (padded / scales[..., None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
    return values.view(m, -1)[:, :k].contiguous(), scales


def fp8_gemm_ref(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                 block_size: tuple[int, int] | None, quantize_activations: bool = False) -> torch.Tensor:
    """``x @ W.T`` (x [M, K] -> [M, N] in x's dtype), products summed in fp32.

    Weight-only (the default: the CPU path and sm_80/86) uses W dequantized into x's dtype. With
    ``quantize_activations`` it computes what the FP8 tensor-core kernel does: x quantized as
    :func:`quantize_fp8_activations` with the weight's K groups, then both sides' exact values.
    """
    if not quantize_activations:
        return (x.float() @ dequantize_fp8(weight, weight_scale, block_size, x.dtype).float().T).to(x.dtype)
    group = block_scales(weight, weight_scale, block_size).block_k
    values, scales = quantize_fp8_activations(x, group)
    activations = values.float() * scales.repeat_interleave(group, 1)[:, :x.shape[1]]
    return (activations @ dequantize_fp8(weight, weight_scale, block_size, torch.float32).T).to(x.dtype)


def fp8_tensor_cores(target: KernelTarget) -> bool:
    """Whether ``target`` multiplies FP8 by FP8: Ada and Hopper do, and Triton's interpreter emulates it."""
    return target.interpreted or target.arch >= 89


# --- Triton ----------------------------------------------------------------------------------------


@jit
def fp8_weight_tile(w_ptr, s_ptr, w_stride, s_stride, scale_block_n, scale_block_k, cols, depth, in_k, in_n,
                    DTYPE: tl.constexpr):
    """The dequantized tile ``W[cols, depth].T`` [BLOCK_K, BLOCK_N] in DTYPE (zero where masked).

    ``w_ptr`` points at row 0 of one weight's bytes (the FP8 weight viewed as uint8: Triton has
    no e4m3 type before sm_89), ``s_ptr`` at its block grid of scales; ``depth`` are absolute K
    indices. A scale is read by every lane of its block: repeated addresses the cache serves.
    """
    mask = in_k[:, None] & in_n[None, :]
    byte = tl.load(w_ptr + cols.to(tl.int64)[None, :] * w_stride + depth[:, None], mask=mask, other=0).to(tl.uint16)
    # e4m3's exponent and mantissa bits placed in fp16's read as the value times 2**(7 - 15), exactly,
    # subnormals included; fp16 -> fp32 and the power of two are exact too.
    half = ((byte & 0x80) << 8) | ((byte & 0x7F) << 7)
    weight = half.to(tl.float16, bitcast=True).to(tl.float32) * 256.0
    scale = tl.load(s_ptr + (cols // scale_block_n)[None, :] * s_stride + (depth // scale_block_k)[:, None],
                    mask=mask, other=0.0)
    return (weight * scale).to(DTYPE)


def fp8_gemm_tiles(m: int, n: int, k: int, scales: BlockScales, activation_dtype: torch.dtype,
                   target: KernelTarget) -> GemmTiles:
    """Row tiles as small as decode's few rows. With FP8 activations a K tile lies inside one scale
    group (it divides bk, DeepSeek's 128 giving 128); weight-only, 64 deep (32 in fp32)."""
    block_m = row_tile(m)
    block_n = spread_columns(column_tile(block_m, n), n, -(-m // block_m), target)
    if activation_dtype == FP8 and scales.block_k < k:
        block_k = min(128, scales.block_k & -scales.block_k)  # the largest power of two dividing bk
        if block_k < 32:  # an FP8 MMA is 32 deep
            raise ValueError(f"FP8 weight blocks {scales.block_k} wide in K are not a multiple of 32")
    elif activation_dtype == FP8:
        block_k = min(128, max(32, next_power_of_2(k)))
    else:
        block_k = min(32 if activation_dtype == torch.float32 else 64, max(16, next_power_of_2(k)))
    weight_bytes = 1 if activation_dtype == FP8 else TILE_BYTES_PER_WEIGHT
    stage_bytes = (block_m * activation_dtype.itemsize + block_n * weight_bytes) * block_k
    return GemmTiles(block_m, block_n, block_k, num_warps=4, num_stages=pipeline_stages(stage_bytes, target))


@jit(do_not_specialize=("m",))
def _fp8_gemm_kernel(a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr, m, n, k, scale_block_n, scale_block_k,
                     a_stride, a_scale_stride, w_stride, w_scale_stride, out_stride,
                     FP8_DOT: tl.constexpr, K_GROUPED: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_m, in_n = rows < m, cols < n
    a_scale_ptrs = a_scale_ptr + rows.to(tl.int64) * a_scale_stride
    w_scale_ptrs = w_scale_ptr + (cols // scale_block_n) * w_scale_stride
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        in_k = depth < k
        a = tl.load(a_ptr + rows.to(tl.int64)[:, None] * a_stride + depth[None, :],
                    mask=in_m[:, None] & in_k[None, :], other=0.0)
        if FP8_DOT:
            w = tl.load(w_ptr + cols.to(tl.int64)[None, :] * w_stride + depth[:, None],
                        mask=in_k[:, None] & in_n[None, :], other=0.0)
            if K_GROUPED:  # the tile lies in one K group: scale its partial product
                group = start // scale_block_k
                a_scale = tl.load(a_scale_ptrs + group, mask=in_m, other=0.0)
                w_scale = tl.load(w_scale_ptrs + group, mask=in_n, other=0.0)
                acc += tl.dot(a, w) * a_scale[:, None] * w_scale[None, :]
            else:
                acc = tl.dot(a, w, acc)
        else:
            w = fp8_weight_tile(w_ptr, w_scale_ptr, w_stride, w_scale_stride, scale_block_n, scale_block_k,
                                cols, depth, in_k, in_n, a_ptr.dtype.element_ty)
            acc = tl.dot(a, w, acc, input_precision=DOT_PRECISION)
    if FP8_DOT and not K_GROUPED:  # one scale per row and per column: applied once
        acc = acc * tl.load(a_scale_ptrs, mask=in_m, other=0.0)[:, None] * tl.load(w_scale_ptrs, mask=in_n,
                                                                                       other=0.0)[None, :]
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


def fp8_gemm(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
             block_size: tuple[int, int] | None) -> torch.Tensor:
    """Triton version of :func:`fp8_gemm_ref` (with ``quantize_activations`` where the GPU has FP8
    tensor cores); x may have leading dimensions, K last.

    Grid ``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))``: a tile of rows times a tile of output columns.
    Memory: with FP8 tensor cores, x is first read once to quantize it (a few PyTorch ops), then each
    program reads its rows of FP8 activations and their scales, its columns of the weight and its
    scales once, and writes its tile of the output.
    """
    if weight.dtype != FP8 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"fp8_gemm needs a {FP8} weight [N, {x.shape[-1]}], got {weight.dtype} "
                         f"{tuple(weight.shape)}")
    scales = block_scales(weight, weight_scale, block_size)
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        target = device_target(x.device)
        # Quantized by PyTorch ops, not in the kernel: Triton's interpreter casts to e4m3 wrongly,
        # so an in-kernel quantization could not be tested off the GPU.
        activations, activation_scales = (quantize_fp8_activations(rows, scales.block_k)
                                          if fp8_tensor_cores(target) else (rows.contiguous(), None))
        fp8_gemm_launch(activations, activation_scales, weight.contiguous(), scales, out, target)()
    return out.view(*x.shape[:-1], weight.shape[0])


def fp8_gemm_launch(activations: torch.Tensor, activation_scales: torch.Tensor | None, weight: torch.Tensor,
                    scales: BlockScales, out: torch.Tensor, target: KernelTarget) -> Launch:
    """The launch of :func:`fp8_gemm` on ``target``, decided without a device (the compile check
    builds it). FP8 ``activations`` with their ``activation_scales`` run the FP8 dot; activations in
    a float dtype, with no scales, run weight-only."""
    (m, k), n = activations.shape, weight.shape[0]
    fp8_dot = activations.dtype == FP8
    weight = weight if fp8_dot else weight.view(torch.uint8)  # fp8_weight_tile reads the bits
    tiles = fp8_gemm_tiles(m, n, k, scales, activations.dtype, target)
    a_scales = activation_scales if fp8_dot else scales.scales  # never read weight-only
    return Launch(_fp8_gemm_kernel, (-(-m // tiles.block_m), -(-n // tiles.block_n)),
                  (activations, a_scales, weight, scales.scales, out, m, n, k, scales.block_n, scales.block_k,
                   activations.stride(0), a_scales.stride(0), weight.stride(0), scales.scales.stride(0),
                   out.stride(0)),
                  {"FP8_DOT": fp8_dot, "K_GROUPED": fp8_dot and scales.block_k < k, "BLOCK_M": tiles.block_m,
                   "BLOCK_N": tiles.block_n, "BLOCK_K": tiles.block_k,
                   "DOT_PRECISION": "ieee" if activations.dtype == torch.float32 else "tf32",
                   "num_warps": tiles.num_warps, "num_stages": tiles.num_stages})
