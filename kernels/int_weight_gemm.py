"""The linear layer of INT4 and INT8 weight-only checkpoints (GPTQ, AWQ, compressed-tensors W4A16/W8A16).

Weights stay packed in memory, eight 4-bit or four 8-bit values to an int32, and are dequantized
tile by tile inside the GEMM, so a decode step reads a quarter (INT4) or half (INT8) of the bytes
of a half-precision weight. Activations and the product stay in the activations' dtype.

The canonical layout, which every loader converts its checkpoint's packing to:

- ``qweight`` int32 [N, K * bits // 32], packed along K: element k of row n sits in word
  ``k // (32 // bits)`` at bit ``(k % (32 // bits)) * bits``, unsigned in [0, 2**bits);
- ``scales`` [N, K // group_size] in the activations' dtype;
- ``zeros`` uint8 [N, K // group_size], or None for symmetric weights (zero point 2**(bits - 1)).

``W[n, k] = (q[n, k] - z[n, k // group_size]) * s[n, k // group_size]``; ``group_size == K`` is
one scale per output channel.
"""

from __future__ import annotations

import torch

from ._triton import Launch, jit, next_power_of_2, tl
from .gemm_tiles import GemmTiles, column_tile, pipeline_stages, row_tile, spread_columns
from .target import KernelTarget, device_target

SUPPORTED_BITS = (4, 8)
# What a dequantized tile loads per weight element, counted for the pipeline's shared memory: its
# word, its scale (at most fp32) and its zero point, each lane loading its own.
TILE_BYTES_PER_WEIGHT = 4 + 4 + 1


def pack_int_weight(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned values [..., K] (any integer dtype, each in [0, 2**bits)) -> int32 words [..., K * bits // 32]."""
    per_word = values_per_word(bits)
    if q.shape[-1] % per_word:
        raise ValueError(f"K = {q.shape[-1]} is not a multiple of {per_word}, the {bits}-bit values in a word")
    shifts = torch.arange(per_word, device=q.device, dtype=torch.int64) * bits
    words = (q.to(torch.int64).unflatten(-1, (-1, per_word)) << shifts).sum(-1)
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)  # the top bit is the sign


def unpack_int_weight(qweight: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of :func:`pack_int_weight`: int32 words [..., W] -> uint8 values [..., W * 32 // bits].

    Read as bytes (words are little-endian on every platform torch runs on): an 8-bit value is a byte, two
    4-bit values share one, low nibble first. Five to ten times faster than shifting words.
    """
    values_per_word(bits)
    data = qweight.contiguous().view(torch.uint8)
    if bits == 8:
        return data
    return torch.stack((data & 0xF, data >> 4), dim=-1).flatten(-2)


def dequantize_int_weight(qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None, group_size: int,
                          bits: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The weight [..., N, K] in ``dtype`` (the scales' by default), each value rounded once, as the kernel
    does. ``q - z`` is a small integer, exact in any float type, so its product with a scale already in
    ``dtype`` rounds once there: it is computed in ``dtype`` then, without fp32's larger temporaries."""
    dtype = dtype or scales.dtype
    compute = dtype if scales.dtype == dtype else torch.float32
    q = unpack_int_weight(qweight, bits).to(compute).unflatten(-1, (-1, group_size))
    zero = zeros.to(compute)[..., None] if zeros is not None else 2 ** (bits - 1)
    return ((q - zero) * scales.to(compute)[..., None]).flatten(-2).to(dtype)


def int_weight_gemm_ref(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                        group_size: int, bits: int) -> torch.Tensor:
    """``x @ W.T`` (x [M, K] -> [M, N]) with W dequantized into x's dtype and products summed in fp32."""
    _check_inputs(x, qweight, scales, zeros, group_size, bits)
    weight = dequantize_int_weight(qweight, scales.to(x.dtype), zeros, group_size, bits)
    return (x.float() @ weight.float().T).to(x.dtype)


def values_per_word(bits: int) -> int:
    """8 for INT4, 4 for INT8; a ValueError for any other width."""
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"integer weights of {bits} bits are not supported (only {SUPPORTED_BITS})")
    return 32 // bits


def _check_inputs(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                  group_size: int, bits: int) -> None:
    k = qweight.shape[-1] * values_per_word(bits)
    if x.shape[-1] != k:
        raise ValueError(f"x {tuple(x.shape)} does not match a packed weight of K = {k}")
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size {group_size} does not divide K = {k}")
    groups = (qweight.shape[0], k // group_size)
    if tuple(scales.shape) != groups or (zeros is not None and tuple(zeros.shape) != groups):
        raise ValueError(f"scales {tuple(scales.shape)} and zeros {None if zeros is None else tuple(zeros.shape)} "
                         f"must both be {groups}")


# --- Triton ----------------------------------------------------------------------------------------


@jit
def int_weight_tile(q_ptr, s_ptr, z_ptr, q_stride, s_stride, z_stride, cols, depth, in_k, in_n, group_size,
                    BITS: tl.constexpr, HAS_ZEROS: tl.constexpr, DTYPE: tl.constexpr):
    """The dequantized tile ``W[cols, depth].T`` [BLOCK_K, BLOCK_N] in DTYPE (zero where masked).

    ``q_ptr``, ``s_ptr`` and ``z_ptr`` point at row 0 of one weight; ``depth`` are absolute K indices.
    Each word is read by the 32 // BITS lanes that unpack it, and each scale by its group's lanes:
    repeated addresses that the cache serves.
    """
    per_word: tl.constexpr = 32 // BITS
    mask = in_k[:, None] & in_n[None, :]
    cols64 = cols.to(tl.int64)[None, :]
    words = tl.load(q_ptr + cols64 * q_stride + (depth // per_word)[:, None], mask=mask, other=0)
    q = (words >> ((depth % per_word) * BITS)[:, None]) & ((1 << BITS) - 1)
    groups = (depth // group_size)[:, None]
    scale = tl.load(s_ptr + cols64 * s_stride + groups, mask=mask, other=0.0).to(tl.float32)
    if HAS_ZEROS:
        zero = tl.load(z_ptr + cols64 * z_stride + groups, mask=mask, other=0).to(tl.int32)
    else:
        zero = 1 << (BITS - 1)
    return ((q - zero).to(tl.float32) * scale).to(DTYPE)


def int_gemm_tiles(m: int, n: int, k: int, dtype: torch.dtype, target: KernelTarget) -> GemmTiles:
    """K tiles of 64 (32 in fp32); as many stages as fit an x tile and what the weight tile loads.
    Prefill's 64-row tiles get 8 warps: with 4, INT4 with zeros spilled on sm_86 at two stages."""
    block_m = row_tile(m)
    block_n = spread_columns(column_tile(block_m, n), n, -(-m // block_m), target)
    block_k = min(32 if dtype == torch.float32 else 64, max(16, next_power_of_2(k)))
    stage_bytes = (block_m * dtype.itemsize + block_n * TILE_BYTES_PER_WEIGHT) * block_k
    return GemmTiles(block_m, block_n, block_k, num_warps=8 if block_m == 64 else 4,
                     num_stages=pipeline_stages(stage_bytes, target))


@jit(do_not_specialize=("m",))
def _int_weight_gemm_kernel(x_ptr, q_ptr, s_ptr, z_ptr, out_ptr, m, n, k, group_size,
                            x_stride, q_stride, s_stride, z_stride, out_stride,
                            BITS: tl.constexpr, HAS_ZEROS: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            DOT_PRECISION: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        in_k = depth < k
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * x_stride + depth[None, :],
                    mask=(rows < m)[:, None] & in_k[None, :], other=0.0)
        w = int_weight_tile(q_ptr, s_ptr, z_ptr, q_stride, s_stride, z_stride, cols, depth, in_k, cols < n,
                            group_size, BITS, HAS_ZEROS, x_ptr.dtype.element_ty)
        acc = tl.dot(x, w, acc, input_precision=DOT_PRECISION)
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows < m)[:, None] & (cols < n)[None, :])


def int_weight_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                    group_size: int, bits: int) -> torch.Tensor:
    """Triton version of :func:`int_weight_gemm_ref`; x may have leading dimensions, K last.

    Grid ``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))``: a tile of rows times a tile of output columns.
    Memory: each program reads its rows of x, its columns' packed words, scales and zeros once, and
    writes its tile of the output; the dequantized weight exists only in registers.
    """
    _check_inputs(x, qweight, scales, zeros, group_size, bits)
    rows = x.reshape(-1, x.shape[-1])
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    out = torch.empty(rows.shape[0], qweight.shape[0], dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        int_weight_gemm_launch(rows, qweight.contiguous(), scales.to(x.dtype).contiguous(),
                               zeros.contiguous() if zeros is not None else None, group_size, bits, out,
                               device_target(x.device))()
    return out.view(*x.shape[:-1], qweight.shape[0])


def int_weight_gemm_launch(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                           group_size: int, bits: int, out: torch.Tensor, target: KernelTarget) -> Launch:
    """The launch of :func:`int_weight_gemm` on ``target``, decided without a device (the compile check builds it)."""
    (m, k), n = x.shape, qweight.shape[0]
    tiles = int_gemm_tiles(m, n, k, x.dtype, target)
    grid = (-(-m // tiles.block_m), -(-n // tiles.block_n))
    zero_args = (zeros, zeros.stride(0)) if zeros is not None else (scales, 0)  # never read without HAS_ZEROS
    return Launch(_int_weight_gemm_kernel, grid,
                  (x, qweight, scales, zero_args[0], out, m, n, k, group_size, x.stride(0), qweight.stride(0),
                   scales.stride(0), zero_args[1], out.stride(0)),
                  {"BITS": bits, "HAS_ZEROS": zeros is not None, "BLOCK_M": tiles.block_m,
                   "BLOCK_N": tiles.block_n, "BLOCK_K": tiles.block_k,
                   "DOT_PRECISION": "ieee" if x.dtype == torch.float32 else "tf32",
                   "num_warps": tiles.num_warps, "num_stages": tiles.num_stages})
