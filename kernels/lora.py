"""Many LoRA adapters in one batch: each token's projection gets its own adapter's low-rank update.

A linear layer with adapters computes ``base(x) + (x @ A.T) @ B.T * scaling`` per token, with the
token's adapter's A and B. The adapters sit in slots: ``lora_a`` [S, R, H] and ``lora_b`` [S, O, R]
stack slot s's matrices, each padded with zeros to the largest rank R; ``token_slots`` [T] names
each token's slot, -1 for a token of the base model. Two steps, as Punica's SGMV and S-LoRA do:

- ``lora_shrink``: y [T, R] = x @ A[slot].T * scale, zeros for base-model tokens;
- ``lora_expand``: out [T, O] += y @ B[slot].T * scaling[slot] in place, base-model rows untouched.
  ``out`` may be a column slice of a wider output (a view with a row stride), so a merged q/k/v or
  gate/up projection expands each of its parts into its own columns; ``y`` may be a column slice
  too, so the parts' A matrices can be stacked along R and shrunk in one call.

Work is grouped by slot, never looped over tokens. ``token_groups`` sorts a step's tokens by slot
once; the returned ``LoRABatch`` is passed in place of ``token_slots`` to every projection of every
layer, so the sort is not repeated. Tokens arrive in any order: the kernels gather each slot's rows.

- The CPU path (kernels/lora_cpu.py) multiplies an adapter's long runs of tokens in place and
  gathers the scattered ones in slot order: one matmul per run or per slot present. A batch
  ordered by adapter runs in place throughout, and so fastest.
- The Triton kernels share the fused MoE's alignment (kernels/fused_moe.py): each slot's tokens
  padded to whole row tiles, so every tile multiplies one adapter's matrix as one GEMM tile, for a
  decode step's few tokens per adapter as for a prefill's many; nothing is read back to the host.
- ``lora_shrink_ref`` / ``lora_expand_ref`` loop over tokens: the tests' reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._triton import Launch, jit, next_power_of_2, tl
from .fused_moe import ExpertAlignment, align_by_expert
from .gemm_tiles import column_tile, pipeline_stages, row_tile
from .lora_cpu import CPUGroups, lora_expand_cpu, lora_shrink_cpu
from .target import KernelTarget, device_target


def lora_shrink_ref(x: torch.Tensor, lora_a: torch.Tensor, token_slots: torch.Tensor,
                    scale: float = 1.0) -> torch.Tensor:  # x [T, H], lora_a [S, R, H] -> [T, R]
    y = torch.zeros(x.shape[0], lora_a.shape[1], dtype=x.dtype, device=x.device)
    for token, slot in enumerate(token_slots.tolist()):
        if slot >= 0:
            y[token] = (lora_a[slot].float() @ x[token].float() * scale).to(x.dtype)
    return y


def lora_expand_ref(y: torch.Tensor, lora_b: torch.Tensor, token_slots: torch.Tensor, out: torch.Tensor,
                    scaling: torch.Tensor) -> None:  # y [T, R], lora_b [S, O, R], out [T, O] in place
    for token, slot in enumerate(token_slots.tolist()):
        if slot >= 0:
            delta = lora_b[slot].float() @ y[token].float() * scaling[slot].float()
            out[token] = (out[token].float() + delta).to(out.dtype)


# --- the step's tokens grouped by slot -------------------------------------------------------------


@dataclass
class LoRABatch:
    """A step's tokens grouped by adapter slot, computed once and shared by every projection.

    The CPU path's grouping (one host read of the counts) and each GPU alignment are computed on
    first use and kept: all projections of all layers in a step reuse them.
    """

    token_slots: torch.Tensor  # [T] int64, -1 for base-model tokens
    _cpu_groups: CPUGroups | None = field(default=None, repr=False)
    _alignments: dict[tuple[int, int], ExpertAlignment] = field(default_factory=dict, repr=False)

    @property
    def num_tokens(self) -> int:
        return self.token_slots.shape[0]

    def cpu_groups(self) -> CPUGroups:
        if self._cpu_groups is None:
            self._cpu_groups = CPUGroups.of(self.token_slots)
        return self._cpu_groups

    def alignment(self, num_slots: int) -> ExpertAlignment:
        """Tokens sorted by slot, each slot's run padded to whole row tiles; base-model tokens form
        the run of slot ``num_slots``, whose tiles the kernels skip."""
        block_m = row_tile(-(-self.num_tokens // (num_slots + 1)))
        key = (num_slots, block_m)
        if key not in self._alignments:
            slots = torch.where(self.token_slots < 0, num_slots, self.token_slots)
            self._alignments[key] = align_by_expert(slots[:, None], num_slots + 1, block_m)
        return self._alignments[key]


def token_groups(token_slots: torch.Tensor) -> LoRABatch:
    """The step's ``LoRABatch``: build it once per step, pass it to every ``lora_shrink``/``lora_expand``."""
    if token_slots.dim() != 1:
        raise ValueError(f"token_slots must be one slot per token, got shape {tuple(token_slots.shape)}")
    return LoRABatch(token_slots.long())


def _as_batch(token_slots: torch.Tensor | LoRABatch) -> LoRABatch:
    return token_slots if isinstance(token_slots, LoRABatch) else token_groups(token_slots)


# --- what the layers call ----------------------------------------------------------------------------


def lora_shrink(x: torch.Tensor, lora_a: torch.Tensor, token_slots: torch.Tensor | LoRABatch,
                scale: float = 1.0) -> torch.Tensor:  # x [T, H], lora_a [S, R, H] -> [T, R] in x's dtype
    """``x[t] @ lora_a[slot[t]].T * scale`` per token, zeros where the slot is -1: Triton on CUDA,
    the grouped CPU path elsewhere."""
    if x.device.type == "cuda":
        return lora_shrink_triton(x, lora_a, token_slots, scale)
    batch = _as_batch(token_slots)
    _check_shrink(x, lora_a, batch)
    return lora_shrink_cpu(x, lora_a, batch.cpu_groups(), scale)


def lora_expand(y: torch.Tensor, lora_b: torch.Tensor, token_slots: torch.Tensor | LoRABatch, out: torch.Tensor,
                scaling: torch.Tensor) -> None:  # y [T, R], lora_b [S, O, R], scaling [S] fp32, out [T, O]
    """``out[t] += y[t] @ lora_b[slot[t]].T * scaling[slot[t]]`` in place, rows whose slot is -1
    untouched. ``out`` may be a column slice of a wider tensor (unit column stride, any row
    stride): a merged projection expands each part into ``out[:, start:end]``."""
    if y.device.type == "cuda":
        return lora_expand_triton(y, lora_b, token_slots, out, scaling)
    batch = _as_batch(token_slots)
    _check_expand(y, lora_b, batch, out, scaling)
    lora_expand_cpu(y, lora_b, batch.cpu_groups(), out, scaling)


def _check_shrink(x: torch.Tensor, lora_a: torch.Tensor, batch: LoRABatch) -> None:
    if x.dim() != 2 or lora_a.dim() != 3 or x.shape[1] != lora_a.shape[2]:
        raise ValueError(f"x {tuple(x.shape)} does not match lora_a {tuple(lora_a.shape)} ([slots, rank, hidden])")
    if x.dtype != lora_a.dtype:
        raise ValueError(f"x and lora_a must share a dtype, got {x.dtype} and {lora_a.dtype}")
    if batch.num_tokens != x.shape[0]:
        raise ValueError(f"{batch.num_tokens} token slots for {x.shape[0]} tokens")


def _check_expand(y: torch.Tensor, lora_b: torch.Tensor, batch: LoRABatch, out: torch.Tensor,
                  scaling: torch.Tensor) -> None:
    if y.dim() != 2 or lora_b.dim() != 3 or y.shape[1] != lora_b.shape[2]:
        raise ValueError(f"y {tuple(y.shape)} does not match lora_b {tuple(lora_b.shape)} ([slots, out, rank])")
    if out.shape != (y.shape[0], lora_b.shape[1]) or out.stride(1) != 1:
        raise ValueError(f"out {tuple(out.shape)} must be [{y.shape[0]}, {lora_b.shape[1]}] with unit column stride")
    if not (y.dtype == lora_b.dtype == out.dtype):
        raise ValueError(f"y, lora_b and out must share a dtype, got {y.dtype}, {lora_b.dtype}, {out.dtype}")
    if scaling.shape != (lora_b.shape[0],):
        raise ValueError(f"scaling {tuple(scaling.shape)} must hold one factor per slot ({lora_b.shape[0]})")
    if batch.num_tokens != y.shape[0]:
        raise ValueError(f"{batch.num_tokens} token slots for {y.shape[0]} tokens")


# --- Triton --------------------------------------------------------------------------------------------


@jit(do_not_specialize=("num_tokens",))  # the step's token count: no variant per batch size
def _lora_shrink_kernel(
    x_ptr, a_ptr, y_ptr, sorted_tokens_ptr, tile_slots_ptr, num_padded_ptr, num_tokens, num_slots, hidden, rank,
    scale, x_stride, a_stride_s, a_stride_r, y_stride,
    BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    if tile * BLOCK_M >= tl.load(num_padded_ptr):
        return
    slot = tl.load(tile_slots_ptr + tile).to(tl.int64)
    if slot >= num_slots:  # the base-model tokens' run
        return
    tokens = tl.load(sorted_tokens_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = tokens < num_tokens
    rows = tokens.to(tl.int64)
    ranks = tl.arange(0, BLOCK_R)
    in_r = ranks < rank
    a_slot = a_ptr + slot * a_stride_s
    acc = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
    for start in range(0, hidden, BLOCK_K):
        depth = start + tl.arange(0, BLOCK_K)
        in_k = depth < hidden
        x = tl.load(x_ptr + rows[:, None] * x_stride + depth[None, :], mask=valid[:, None] & in_k[None, :], other=0.0)
        a = tl.load(a_slot + ranks[None, :] * a_stride_r + depth[:, None], mask=in_k[:, None] & in_r[None, :],
                    other=0.0)  # [BLOCK_K, BLOCK_R] tile of A[slot].T
        acc = tl.dot(x, a, acc, input_precision=DOT_PRECISION)
    acc = acc * scale
    tl.store(y_ptr + rows[:, None] * y_stride + ranks[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=valid[:, None] & in_r[None, :])


@jit(do_not_specialize=("num_tokens",))
def _lora_expand_kernel(
    y_ptr, b_ptr, out_ptr, scaling_ptr, sorted_tokens_ptr, tile_slots_ptr, num_padded_ptr, num_tokens, num_slots,
    out_features, rank, y_stride, b_stride_s, b_stride_o, out_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    if tile * BLOCK_M >= tl.load(num_padded_ptr):
        return
    slot = tl.load(tile_slots_ptr + tile).to(tl.int64)
    if slot >= num_slots:
        return
    tokens = tl.load(sorted_tokens_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = tokens < num_tokens
    rows = tokens.to(tl.int64)
    ranks = tl.arange(0, BLOCK_R)
    in_r = ranks < rank
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_n = cols < out_features
    y = tl.load(y_ptr + rows[:, None] * y_stride + ranks[None, :], mask=valid[:, None] & in_r[None, :], other=0.0)
    b = tl.load(b_ptr + slot * b_stride_s + cols[None, :].to(tl.int64) * b_stride_o + ranks[:, None],
                mask=in_r[:, None] & in_n[None, :], other=0.0)  # [BLOCK_R, BLOCK_N] tile of B[slot].T
    delta = tl.dot(y, b, input_precision=DOT_PRECISION) * tl.load(scaling_ptr + slot)
    out_ptrs = out_ptr + rows[:, None] * out_stride + cols[None, :]
    mask = valid[:, None] & in_n[None, :]
    out = tl.load(out_ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptrs, (out + delta).to(out_ptr.dtype.element_ty), mask=mask)


def _rank_tile(rank: int) -> int:
    return max(16, next_power_of_2(rank))  # tl.dot needs 16 or more on each side


def _dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def lora_shrink_triton(x: torch.Tensor, lora_a: torch.Tensor, token_slots: torch.Tensor | LoRABatch,
                       scale: float = 1.0) -> torch.Tensor:
    """Triton version of :func:`lora_shrink`.

    Grid ``(capacity // block_m,)``: a row tile, all of one slot's tokens (the base-model run's
    tiles and tiles past ``num_padded`` exit at once). Memory: each tile reads its tokens' rows of x
    and its slot's A once and writes its rows of y; base-model rows of y are zeroed here.
    """
    batch = _as_batch(token_slots)
    _check_shrink(x, lora_a, batch)
    y = torch.zeros(x.shape[0], lora_a.shape[1], dtype=x.dtype, device=x.device)
    if x.shape[0]:
        lora_shrink_launch(x, lora_a, batch, y, scale, device_target(x.device))()
    return y


def lora_shrink_launch(x: torch.Tensor, lora_a: torch.Tensor, batch: LoRABatch, y: torch.Tensor, scale: float,
                       target: KernelTarget) -> Launch:
    """The launch of :func:`lora_shrink_triton` on ``target``, decided without a device."""
    x, lora_a = _unit_last_stride(x), _unit_last_stride(lora_a)
    num_slots, rank, hidden = lora_a.shape
    alignment = batch.alignment(num_slots)
    block_r = _rank_tile(rank)
    block_k = min(32 if x.dtype == torch.float32 else 64, max(16, next_power_of_2(hidden)))
    stages = pipeline_stages((alignment.block_m + block_r) * block_k * x.dtype.itemsize, target)
    return Launch(_lora_shrink_kernel, (alignment.sorted_pairs.shape[0] // alignment.block_m,),
                  (x, lora_a, y, alignment.sorted_pairs, alignment.block_experts, alignment.num_padded,
                   x.shape[0], num_slots, hidden, rank, float(scale), x.stride(0), lora_a.stride(0),
                   lora_a.stride(1), y.stride(0)),
                  {"BLOCK_M": alignment.block_m, "BLOCK_R": block_r, "BLOCK_K": block_k,
                   "DOT_PRECISION": _dot_precision(x.dtype), "num_warps": 4, "num_stages": stages})


def lora_expand_triton(y: torch.Tensor, lora_b: torch.Tensor, token_slots: torch.Tensor | LoRABatch,
                       out: torch.Tensor, scaling: torch.Tensor) -> None:
    """Triton version of :func:`lora_expand`.

    Grid ``(capacity // block_m, cdiv(O, block_n))``: axis 0 a row tile of one slot's tokens, axis 1
    a slice of output columns. Memory: each program reads its tokens' rows of y, a [R, block_n]
    tile of its slot's B and its rows of out, and writes those rows of out back; a token is in one
    tile only, so no two programs write the same element.
    """
    batch = _as_batch(token_slots)
    _check_expand(y, lora_b, batch, out, scaling)
    if y.shape[0]:
        lora_expand_launch(y, lora_b, batch, out, scaling, device_target(y.device))()


def lora_expand_launch(y: torch.Tensor, lora_b: torch.Tensor, batch: LoRABatch, out: torch.Tensor,
                       scaling: torch.Tensor, target: KernelTarget) -> Launch:
    """The launch of :func:`lora_expand_triton` on ``target``, decided without a device."""
    y, lora_b = _unit_last_stride(y), _unit_last_stride(lora_b)
    num_slots, out_features, rank = lora_b.shape
    alignment = batch.alignment(num_slots)
    block_n = column_tile(alignment.block_m, out_features)
    return Launch(_lora_expand_kernel, (alignment.sorted_pairs.shape[0] // alignment.block_m,
                                        -(-out_features // block_n)),
                  (y, lora_b, out, scaling.float().contiguous(), alignment.sorted_pairs, alignment.block_experts,
                   alignment.num_padded, y.shape[0], num_slots, out_features, rank, y.stride(0), lora_b.stride(0),
                   lora_b.stride(1), out.stride(0)),
                  {"BLOCK_M": alignment.block_m, "BLOCK_N": block_n, "BLOCK_R": _rank_tile(rank),
                   "DOT_PRECISION": _dot_precision(y.dtype), "num_warps": 4, "num_stages": 1})


def _unit_last_stride(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()
