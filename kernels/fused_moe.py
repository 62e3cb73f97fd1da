"""The mixture-of-experts MLP: each token through its top-k experts' gated MLPs, weighted and summed.

Experts are stacked: ``w13`` [E, 2 * inter, hidden] holds each expert's gate rows then its up
rows (as the dense MLP's fused projection) and ``w2`` [E, hidden, inter] its down projection.
Work is grouped by expert, never by token: the ``num_tokens * top_k`` (token, expert) pairs are
sorted by expert, so each expert multiplies all of its tokens at once.

- The reference (also the CPU path) runs one matmul per expert over its own rows.
- The Triton version pads each expert's rows to a multiple of the row tile, so every tile belongs
  to one expert, and runs each projection as one grouped-GEMM launch; the down projection
  multiplies each row by its top-k weight in its epilogue. It reads nothing back to the host,
  so a CUDA graph can capture it.

A pair is numbered ``token * top_k + slot``, the order of ``topk_ids.flatten()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._triton import Launch, jit, next_power_of_2, tl
from .silu_mul import silu_and_mul_ref, silu_and_mul_triton
from .target import KernelTarget, device_target


def fused_moe_ref(
    x: torch.Tensor,  # [num_tokens, hidden]
    w13: torch.Tensor | Sequence[torch.Tensor],  # [num_experts, 2 * inter, hidden]
    w2: torch.Tensor | Sequence[torch.Tensor],  # [num_experts, hidden, inter]
    topk_weights: torch.Tensor,  # [num_tokens, top_k], any float dtype
    topk_ids: torch.Tensor,  # [num_tokens, top_k] int
    linear: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.linear,
) -> torch.Tensor:  # [num_tokens, hidden]
    """``linear(rows, weight)`` does each expert's matmuls, on ``w13[expert]`` and ``w2[expert]``
    (the CPU path passes a faster one, and per-expert weights it has packed for it)."""
    num_tokens, top_k = topk_ids.shape
    experts = topk_ids.flatten()
    order = torch.argsort(experts, stable=True)  # pairs grouped by expert
    counts = torch.bincount(experts, minlength=len(w13)).tolist()
    rows = x[order // top_k]
    out = torch.empty(order.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if count:
            chunk = slice(start, start + count)
            out[chunk] = linear(silu_and_mul_ref(linear(rows[chunk], w13[expert])), w2[expert])
            start += count
    out *= topk_weights.flatten()[order].float()[:, None]
    return _sum_slots(out, order, num_tokens, top_k).to(x.dtype)


def _sum_slots(sorted_out: torch.Tensor, order: torch.Tensor, num_tokens: int, top_k: int) -> torch.Tensor:
    """Rows in expert order -> each token's sum over its top-k slots, in slot order."""
    pairs = torch.empty_like(sorted_out)
    pairs[order] = sorted_out
    return pairs.view(num_tokens, top_k, sorted_out.shape[1]).sum(1)


# --- Triton ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpertAlignment:
    """The pairs sorted by expert, each expert's run padded to a multiple of ``block_m``."""

    sorted_pairs: torch.Tensor  # [capacity] int32: a pair, or num_pairs for a padding row
    block_experts: torch.Tensor  # [capacity // block_m] int32: the expert of each row tile
    num_padded: torch.Tensor  # [1] int32: rows in use; tiles from there on exit at once
    block_m: int


def align_by_expert(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> ExpertAlignment:
    """Sort the pairs by expert and pad each expert's run to a whole number of row tiles.

    Sizes depend only on the shapes (``capacity`` is the most rows any routing can need), so
    nothing is read back to the host.
    """
    experts = topk_ids.flatten().long()
    num_pairs, device = experts.shape[0], experts.device
    counts = torch.zeros(num_experts, dtype=torch.long, device=device)
    counts.scatter_add_(0, experts, torch.ones_like(experts))
    padded = (counts + block_m - 1) // block_m * block_m
    padded_ends = padded.cumsum(0)
    order = torch.argsort(experts, stable=True)
    sorted_experts = experts[order]
    rank_in_expert = torch.arange(num_pairs, device=device) - (counts.cumsum(0) - counts)[sorted_experts]
    capacity = -(-(num_pairs + num_experts * (block_m - 1)) // block_m) * block_m
    sorted_pairs = torch.full((capacity,), num_pairs, dtype=torch.int32, device=device)
    sorted_pairs[(padded_ends - padded)[sorted_experts] + rank_in_expert] = order.int()
    tile_starts = torch.arange(0, capacity, block_m, device=device)
    block_experts = torch.searchsorted(padded_ends, tile_starts, right=True).clamp_(max=num_experts - 1)
    return ExpertAlignment(sorted_pairs, block_experts.int(), padded_ends[-1:].int(), block_m)


@dataclass(frozen=True)
class GemmTiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


def choose_block_m(num_pairs: int, num_experts: int) -> int:
    """Row tile: small when each expert has few rows (decode), so padding wastes little."""
    rows_per_expert = num_pairs / num_experts
    return 16 if rows_per_expert <= 16 else 32 if rows_per_expert <= 64 else 64


def choose_gemm_tiles(block_m: int, n: int, k: int, dtype: torch.dtype, target: KernelTarget) -> GemmTiles:
    """Tiles for one projection ``[rows, k] x [k, n]``, a pure function of the shapes, dtype and target.

    fp32 tiles are half as deep. Up to three pipeline stages of A and B tiles, as many as fit the
    target's shared memory (sm_86 gives a program 99 KiB; the interpreter needs one).
    """
    block_n = min(128 if block_m <= 32 else 64, max(16, next_power_of_2(n)))
    block_k = min(32 if dtype == torch.float32 else 64, max(16, next_power_of_2(k)))
    stage_bytes = (block_m + block_n) * block_k * dtype.itemsize
    stages = 1 if target.interpreted else max(1, min(3, target.shared_memory // stage_bytes))
    return GemmTiles(block_m, block_n, block_k, num_warps=4 if block_m * block_n <= 4096 else 8, num_stages=stages)


@jit(do_not_specialize=("num_pairs",))  # the step's token count: no variant per batch size
def _grouped_gemm_kernel(
    a_ptr, b_ptr, c_ptr, pair_weights_ptr, sorted_pairs_ptr, block_experts_ptr, num_padded_ptr,
    n, k, num_pairs, a_stride, b_stride_e, b_stride_n, c_stride,
    ROWS_PER_A: tl.constexpr, MUL_WEIGHTS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    if tile * BLOCK_M >= tl.load(num_padded_ptr):
        return
    pairs = tl.load(sorted_pairs_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    expert = tl.load(block_experts_ptr + tile).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    a_rows = (pairs // ROWS_PER_A).to(tl.int64)
    a_ptrs = a_ptr + a_rows[:, None] * a_stride + depth[None, :]
    b_ptrs = b_ptr + expert * b_stride_e + cols[None, :].to(tl.int64) * b_stride_n + depth[:, None]  # [K, N]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        in_k = depth < k - start
        a = tl.load(a_ptrs, mask=valid[:, None] & in_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=in_k[:, None] & (cols < n)[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_WEIGHTS:
        acc = acc * tl.load(pair_weights_ptr + pairs, mask=valid, other=0.0).to(tl.float32)[:, None]
    c_ptrs = c_ptr + pairs[:, None].to(tl.int64) * c_stride + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (cols < n)[None, :])


def grouped_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, alignment: ExpertAlignment,
                 rows_per_a: int, pair_weights: torch.Tensor | None = None) -> None:
    """``out[p] = a[p // rows_per_a] @ b[expert(p)].T`` (times ``pair_weights[p]``) for every pair p.

    a [rows, k] with unit stride on k; b [num_experts, n, k] contiguous; out [num_pairs, n].
    Grid ``(capacity // block_m, cdiv(n, block_n))``: axis 0 a row tile, all of one expert's
    pairs (tiles past ``num_padded`` exit at once); axis 1 a slice of output columns.
    Memory: each tile reads its rows of a and its expert's columns of b once, and writes its
    rows of out; padding rows read and write nothing.
    """
    grouped_gemm_launch(a, b, out, alignment, rows_per_a, device_target(a.device), pair_weights)()


def grouped_gemm_launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, alignment: ExpertAlignment,
                        rows_per_a: int, target: KernelTarget, pair_weights: torch.Tensor | None = None) -> Launch:
    """The launch of :func:`grouped_gemm` on ``target``, decided without a device (the compile check builds it)."""
    n, k = b.shape[1], b.shape[2]
    tiles = choose_gemm_tiles(alignment.block_m, n, k, a.dtype, target)
    grid = (alignment.sorted_pairs.shape[0] // tiles.block_m, -(-n // tiles.block_n))
    weights = pair_weights if pair_weights is not None else out  # never read without MUL_WEIGHTS
    return Launch(_grouped_gemm_kernel, grid,
                  (a, b, out, weights, alignment.sorted_pairs, alignment.block_experts, alignment.num_padded,
                   n, k, out.shape[0], a.stride(0), b.stride(0), b.stride(1), out.stride(0)),
                  {"ROWS_PER_A": rows_per_a, "MUL_WEIGHTS": pair_weights is not None, "BLOCK_M": tiles.block_m,
                   "BLOCK_N": tiles.block_n, "BLOCK_K": tiles.block_k,
                   "DOT_PRECISION": "ieee" if a.dtype == torch.float32 else "tf32",
                   "num_warps": tiles.num_warps, "num_stages": tiles.num_stages})


def fused_moe_triton(
    x: torch.Tensor,  # [num_tokens, hidden]
    w13: torch.Tensor,  # [num_experts, 2 * inter, hidden]
    w2: torch.Tensor,  # [num_experts, hidden, inter]
    topk_weights: torch.Tensor,  # [num_tokens, top_k]
    topk_ids: torch.Tensor,  # [num_tokens, top_k] int
) -> torch.Tensor:  # [num_tokens, hidden]
    """Triton version of :func:`fused_moe_ref`: align, gate/up GEMM, SiLU-and-mul, down GEMM with
    the top-k weights, then each token's sum over its slots."""
    _check_inputs(x, w13, w2, topk_ids)
    num_tokens, top_k = topk_ids.shape
    num_experts, two_inter, hidden = w13.shape
    if num_tokens == 0:
        return torch.empty_like(x)
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    num_pairs = num_tokens * top_k
    alignment = align_by_expert(topk_ids, num_experts, choose_block_m(num_pairs, num_experts))
    gate_up = torch.empty(num_pairs, two_inter, dtype=x.dtype, device=x.device)
    grouped_gemm(x, w13, gate_up, alignment, rows_per_a=top_k)
    down = torch.empty(num_pairs, hidden, dtype=x.dtype, device=x.device)
    grouped_gemm(silu_and_mul_triton(gate_up), w2, down, alignment, rows_per_a=1,
                 pair_weights=topk_weights.reshape(-1).float().contiguous())
    return down.view(num_tokens, top_k, hidden).sum(1)


def _check_inputs(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor) -> None:
    num_experts, two_inter, hidden = w13.shape
    if x.dim() != 2 or x.shape[1] != hidden:
        raise ValueError(f"x {tuple(x.shape)} does not match experts of hidden size {hidden}")
    if w2.shape != (num_experts, hidden, two_inter // 2):
        raise ValueError(f"w2 {tuple(w2.shape)} does not match w13 {tuple(w13.shape)}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk_ids {tuple(topk_ids.shape)} does not match {x.shape[0]} tokens")
    if x.dtype != w13.dtype or x.dtype != w2.dtype:
        raise ValueError(f"x, w13 and w2 must share a dtype, got {x.dtype}, {w13.dtype}, {w2.dtype}")
