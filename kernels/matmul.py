"""A matmul with one tiling for every row count: the GPU's batch-invariant linear layer.

cuBLAS picks its kernel, tiles and split-K by the problem's shape, so a row's result changes with
the number of rows it is multiplied with. This kernel's tiles depend on the weight's shape, the
dtype and the target only: each output element sums over K in BLOCK_K steps in the same order for
any M, and no split-K. It is the GPU path of ``deterministic=True`` (layers/linear.py), slower
than cuBLAS for large M; the CPU gets the same property by multiplying fixed-size row tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._triton import Launch, jit, tl
from .target import KernelTarget, device_target


def matmul_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return F.linear(x, weight, bias)  # x: [M, K], weight: [N, K] -> [M, N]


@dataclass(frozen=True)
class MatmulTiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


def matmul_tiles(n: int, k: int, dtype: torch.dtype, target: KernelTarget) -> MatmulTiles:
    """A pure function of the weight's shape, the dtype and the target: never of the row count."""
    if target.interpreted:
        return MatmulTiles(16, 32, 32, 4, 1)
    block_k = 32 if dtype == torch.float32 else 64
    return MatmulTiles(64, 128, block_k, num_warps=4, num_stages=3)


@jit(do_not_specialize=("m",))
def _matmul_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, m, n, k, x_stride, w_stride, out_stride,
                   HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   DOT_PRECISION: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows.to(tl.int64)[:, None] * x_stride + depth[None, :]
    w_ptrs = w_ptr + cols.to(tl.int64)[None, :] * w_stride + depth[:, None]  # [K, N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        in_k = depth < k - start
        x = tl.load(x_ptrs, mask=(rows < m)[:, None] & in_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=in_k[:, None] & (cols < n)[None, :], other=0.0)
        acc = tl.dot(x, w, acc, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cols < n, other=0.0).to(tl.float32)[None, :]
    out_ptrs = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rows < m)[:, None] & (cols < n)[None, :])


def matmul_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Triton version of :func:`matmul_ref` for 2-D ``x``, batch-invariant.

    Grid ``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))``: a tile of rows times a tile of output columns.
    Memory: each program reads its rows of x and its columns of the weight once, writes its tile.
    """
    x = x if x.stride(-1) == 1 else x.contiguous()
    weight = weight if weight.stride(-1) == 1 else weight.contiguous()
    out = torch.empty(x.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    if x.shape[0]:
        matmul_launch(x, weight, bias, out, device_target(x.device))()
    return out


def matmul_launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                  target: KernelTarget) -> Launch:
    (m, k), n = x.shape, weight.shape[0]
    tiles = matmul_tiles(n, k, x.dtype, target)
    grid = (-(-m // tiles.block_m), -(-n // tiles.block_n))
    return Launch(_matmul_kernel, grid,
                  (x, weight, bias if bias is not None else out, out, m, n, k, x.stride(0), weight.stride(0),
                   out.stride(0)),
                  {"HAS_BIAS": bias is not None, "BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n,
                   "BLOCK_K": tiles.block_k, "DOT_PRECISION": "ieee" if x.dtype == torch.float32 else "tf32",
                   "num_warps": tiles.num_warps, "num_stages": tiles.num_stages})
