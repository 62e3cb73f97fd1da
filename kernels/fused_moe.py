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
- gpt-oss's experts add a bias to the gate/up projection (in the kernel's epilogue) and apply a
  clamped SwiGLU instead of SiLU-and-mul (kernels/silu_mul.py).
- Quantized experts (FP8, INT4/INT8, MXFP4; kernels/expert_weights.py) run through the same
  grouped GEMM, each weight tile dequantized into the activations' dtype as it is loaded; the
  reference dequantizes them one expert at a time.

A pair is numbered ``token * top_k + slot``, the order of ``topk_ids.flatten()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import fp8_gemm, int_weight_gemm, mxfp4
from ._triton import Launch, jit, next_power_of_2, tl
from .expert_weights import ExpertWeights, as_expert_weights
from .fp8_gemm import fp8_weight_tile
from .gemm_tiles import GemmTiles, column_tile, pipeline_stages, row_tile
from .int_weight_gemm import int_weight_tile
from .mxfp4 import mxfp4_weight_tile
from .silu_mul import clamped_swiglu_ref, silu_and_mul_ref, silu_and_mul_triton
from .target import KernelTarget, device_target


def fused_moe_ref(
    x: torch.Tensor,  # [num_tokens, hidden]
    w13: torch.Tensor | Sequence[torch.Tensor] | ExpertWeights,  # [num_experts, 2 * inter, hidden]
    w2: torch.Tensor | Sequence[torch.Tensor] | ExpertWeights,  # [num_experts, hidden, inter]
    topk_weights: torch.Tensor,  # [num_tokens, top_k], any float dtype
    topk_ids: torch.Tensor,  # [num_tokens, top_k] int
    linear: Callable[..., torch.Tensor] = F.linear,
    w13_bias: torch.Tensor | None = None,  # [num_experts, 2 * inter]: gpt-oss's gate/up bias
    clamped_swiglu: tuple[float, float] | None = None,  # gpt-oss's activation (limit, alpha); None: SiLU-and-mul
) -> torch.Tensor:  # [num_tokens, hidden]
    """``linear(rows, weight, bias)`` does each expert's matmuls, on ``w13[expert]`` and ``w2[expert]``
    (the CPU path passes a faster one, and per-expert weights it has packed for it). Quantized
    experts are dequantized into x's dtype one expert at a time."""
    activation = silu_and_mul_ref
    if clamped_swiglu is not None:
        activation = functools.partial(clamped_swiglu_ref, limit=clamped_swiglu[0], alpha=clamped_swiglu[1])
    w13, w2 = (w.experts(x.dtype) if isinstance(w, ExpertWeights) else w for w in (w13, w2))
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
            bias = None if w13_bias is None else w13_bias[expert]
            out[chunk] = linear(activation(linear(rows[chunk], w13[expert], bias)), w2[expert])
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


def choose_block_m(num_pairs: int, num_experts: int) -> int:
    """Row tile: small when each expert has few rows (decode), so padding wastes little."""
    return row_tile(-(-num_pairs // num_experts))


_TILE_BYTES_PER_WEIGHT = {  # dense: the dtype's size
    "fp8": fp8_gemm.TILE_BYTES_PER_WEIGHT, "int": int_weight_gemm.TILE_BYTES_PER_WEIGHT,
    "mxfp4": mxfp4.TILE_BYTES_PER_WEIGHT,
}


def choose_gemm_tiles(block_m: int, n: int, k: int, dtype: torch.dtype, target: KernelTarget,
                      weight_format: str = "dense") -> GemmTiles:
    """Tiles for one projection ``[rows, k] x [k, n]``, a pure function of the shapes, dtype, weight
    format and target.

    fp32 tiles are half as deep. Every row tile is one expert's, so there are programs enough
    without narrowing the columns.
    """
    block_n = column_tile(block_m, n)
    block_k = min(32 if dtype == torch.float32 else 64, max(16, next_power_of_2(k)))
    weight_bytes = _TILE_BYTES_PER_WEIGHT.get(weight_format, dtype.itemsize)
    stage_bytes = (block_m * dtype.itemsize + block_n * weight_bytes) * block_k
    return GemmTiles(block_m, block_n, block_k, num_warps=4 if block_m * block_n <= 4096 else 8,
                     num_stages=pipeline_stages(stage_bytes, target))


@jit(do_not_specialize=("num_pairs",))  # the step's token count: no variant per batch size
def _grouped_gemm_kernel(
    a_ptr, b_ptr, b_scale_ptr, b_zero_ptr, c_ptr, pair_weights_ptr, bias_ptr, sorted_pairs_ptr, block_experts_ptr,
    num_padded_ptr, n, k, num_pairs, scale_block_n, scale_block_k,
    a_stride, b_stride_e, b_stride_n, b_scale_stride_e, b_scale_stride_n, b_zero_stride_e, b_zero_stride_n, c_stride,
    bias_stride_e,
    WEIGHT_FORMAT: tl.constexpr, BITS: tl.constexpr, HAS_ZEROS: tl.constexpr,
    ROWS_PER_A: tl.constexpr, MUL_WEIGHTS: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    if tile * BLOCK_M >= tl.load(num_padded_ptr):
        return
    pairs = tl.load(sorted_pairs_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    expert = tl.load(block_experts_ptr + tile).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_n = cols < n
    a_rows = (pairs // ROWS_PER_A).to(tl.int64)
    b_expert = b_ptr + expert * b_stride_e
    scale_expert = b_scale_ptr + expert * b_scale_stride_e
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        in_k = depth < k
        a = tl.load(a_ptr + a_rows[:, None] * a_stride + depth[None, :], mask=valid[:, None] & in_k[None, :],
                    other=0.0)
        if WEIGHT_FORMAT == "fp8":
            b = fp8_weight_tile(b_expert, scale_expert, b_stride_n, b_scale_stride_n, scale_block_n, scale_block_k,
                                cols, depth, in_k, in_n, a_ptr.dtype.element_ty)
        elif WEIGHT_FORMAT == "int":
            b = int_weight_tile(b_expert, scale_expert, b_zero_ptr + expert * b_zero_stride_e, b_stride_n,
                                b_scale_stride_n, b_zero_stride_n, cols, depth, in_k, in_n, scale_block_k, BITS,
                                HAS_ZEROS, a_ptr.dtype.element_ty)
        elif WEIGHT_FORMAT == "mxfp4":
            b = mxfp4_weight_tile(b_expert, scale_expert, b_stride_n, b_scale_stride_n, cols, depth, in_k, in_n,
                                  a_ptr.dtype.element_ty)
        else:  # dense: [K, N] tile of the expert's [N, K] weight
            b = tl.load(b_expert + cols[None, :].to(tl.int64) * b_stride_n + depth[:, None],
                        mask=in_k[:, None] & in_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:  # the expert's bias [n], before any pair weight
        acc += tl.load(bias_ptr + expert * bias_stride_e + cols, mask=in_n, other=0.0).to(tl.float32)[None, :]
    if MUL_WEIGHTS:
        acc = acc * tl.load(pair_weights_ptr + pairs, mask=valid, other=0.0).to(tl.float32)[:, None]
    c_ptrs = c_ptr + pairs[:, None].to(tl.int64) * c_stride + cols[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & in_n[None, :])


def grouped_gemm(a: torch.Tensor, b: torch.Tensor | ExpertWeights, out: torch.Tensor, alignment: ExpertAlignment,
                 rows_per_a: int, pair_weights: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> None:
    """``out[p] = a[p // rows_per_a] @ b[expert(p)].T`` (plus ``bias[expert(p)]``, times ``pair_weights[p]``)
    for every pair p.

    a [rows, k] with unit stride on k; b [num_experts, n, k] contiguous, or quantized experts whose
    tiles are dequantized into a's dtype as they are loaded; out [num_pairs, n].
    Grid ``(capacity // block_m, cdiv(n, block_n))``: axis 0 a row tile, all of one expert's
    pairs (tiles past ``num_padded`` exit at once); axis 1 a slice of output columns.
    Memory: each tile reads its rows of a and its expert's columns of b (and their scales) once,
    and writes its rows of out; padding rows read and write nothing.
    """
    grouped_gemm_launch(a, b, out, alignment, rows_per_a, device_target(a.device), pair_weights, bias)()


def grouped_gemm_launch(a: torch.Tensor, b: torch.Tensor | ExpertWeights, out: torch.Tensor,
                        alignment: ExpertAlignment, rows_per_a: int, target: KernelTarget,
                        pair_weights: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> Launch:
    """The launch of :func:`grouped_gemm` on ``target``, decided without a device (the compile check builds it)."""
    b = as_expert_weights(b)
    tiles = choose_gemm_tiles(alignment.block_m, b.n, b.k, a.dtype, target, b.format)
    grid = (alignment.sorted_pairs.shape[0] // tiles.block_m, -(-b.n // tiles.block_n))
    weights = pair_weights if pair_weights is not None else out  # never read without MUL_WEIGHTS
    biases = bias if bias is not None else out  # never read without HAS_BIAS
    scales = b.scales if b.scales is not None else b.data  # never read for dense experts
    zeros = b.zeros if b.zeros is not None else scales  # never read without HAS_ZEROS
    data = b.data.view(torch.uint8) if b.format == "fp8" else b.data  # fp8_weight_tile reads the bits
    return Launch(_grouped_gemm_kernel, grid,
                  (a, data, scales, zeros, out, weights, biases, alignment.sorted_pairs, alignment.block_experts,
                   alignment.num_padded, b.n, b.k, out.shape[0], b.block_n, b.block_k, a.stride(0),
                   b.data.stride(0), b.data.stride(1), scales.stride(0), scales.stride(1), zeros.stride(0),
                   zeros.stride(1), out.stride(0), biases.stride(0)),
                  {"WEIGHT_FORMAT": b.format, "BITS": b.bits, "HAS_ZEROS": b.zeros is not None,
                   "ROWS_PER_A": rows_per_a, "MUL_WEIGHTS": pair_weights is not None,
                   "HAS_BIAS": bias is not None, "BLOCK_M": tiles.block_m,
                   "BLOCK_N": tiles.block_n, "BLOCK_K": tiles.block_k,
                   "DOT_PRECISION": "ieee" if a.dtype == torch.float32 else "tf32",
                   "num_warps": tiles.num_warps, "num_stages": tiles.num_stages})


def fused_moe_triton(
    x: torch.Tensor,  # [num_tokens, hidden]
    w13: torch.Tensor | ExpertWeights,  # [num_experts, 2 * inter, hidden]
    w2: torch.Tensor | ExpertWeights,  # [num_experts, hidden, inter]
    topk_weights: torch.Tensor,  # [num_tokens, top_k]
    topk_ids: torch.Tensor,  # [num_tokens, top_k] int
    w13_bias: torch.Tensor | None = None,
    clamped_swiglu: tuple[float, float] | None = None,
) -> torch.Tensor:  # [num_tokens, hidden]
    """Triton version of :func:`fused_moe_ref`: align, gate/up GEMM (with the expert's bias, gpt-oss),
    SiLU-and-mul (or the clamped SwiGLU), down GEMM with the top-k weights, then each token's sum over
    its slots. Quantized experts (FP8, INT4/INT8, MXFP4) are dequantized a tile at a time into x's
    dtype inside the GEMMs."""
    w13, w2 = as_expert_weights(w13), as_expert_weights(w2)
    _check_inputs(x, w13, w2, topk_ids)
    num_tokens, top_k = topk_ids.shape
    if num_tokens == 0:
        return torch.empty_like(x)
    x = x.contiguous()
    num_pairs = num_tokens * top_k
    alignment = align_by_expert(topk_ids, w13.num_experts, choose_block_m(num_pairs, w13.num_experts))
    gate_up = torch.empty(num_pairs, w13.n, dtype=x.dtype, device=x.device)
    grouped_gemm(x, w13, gate_up, alignment, rows_per_a=top_k, bias=w13_bias)
    down = torch.empty(num_pairs, w2.n, dtype=x.dtype, device=x.device)
    grouped_gemm(silu_and_mul_triton(gate_up, clamped_swiglu), w2, down, alignment, rows_per_a=1,
                 pair_weights=topk_weights.reshape(-1).float().contiguous())
    return down.view(num_tokens, top_k, w2.n).sum(1)


def _check_inputs(x: torch.Tensor, w13: ExpertWeights, w2: ExpertWeights, topk_ids: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] != w13.k:
        raise ValueError(f"x {tuple(x.shape)} does not match experts of hidden size {w13.k}")
    if (w2.num_experts, w2.n, w2.k) != (w13.num_experts, w13.k, w13.n // 2):
        raise ValueError(f"w2 {(w2.num_experts, w2.n, w2.k)} does not match w13 {(w13.num_experts, w13.n, w13.k)}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != x.shape[0]:
        raise ValueError(f"topk_ids {tuple(topk_ids.shape)} does not match {x.shape[0]} tokens")
    dense = [w.data.dtype for w in (w13, w2) if w.format == "dense"]
    if any(dtype != x.dtype for dtype in dense):
        raise ValueError(f"x and dense experts must share a dtype, got {x.dtype} and {', '.join(map(str, dense))}")
