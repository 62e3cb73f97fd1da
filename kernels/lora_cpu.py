"""The CPU's grouped LoRA shrink and expand (kernels/lora.py): a few matmuls per adapter, no loop over tokens.

A step's tokens reach a projection in the batch's order, where an adapter's tokens can sit in one
long run (a prefill chunk) or be scattered (one decode token per sequence). Both are cheap only if
handled apart: measured on random:50m's gate/up projection (one thread), scattering 2,048 rows of
results into the fused output with ``index_add_`` cost 6 ms where one ``addmm_`` over the rows in
place cost 1.2 ms, while for 64 scattered decode rows a gather, one matmul per adapter and one
scatter beat a matmul per run of one or two rows.

- Runs of at least ``MIN_SPAN`` tokens of one adapter are multiplied in place, each its own matmul;
  so is every run when there are hardly more runs than adapters (a batch ordered by adapter).
- The other tokens with an adapter are gathered in adapter order, multiplied with one matmul per
  adapter present, and scattered back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_SPAN = 16  # tokens: a shorter run joins the gathered ones, where its adapter's matmul takes them all
# Runs beyond one per adapter that still go in place: each costs a matmul, the gather and scatter
# they would save cost about four.
EXTRA_RUNS = 4


@dataclass(frozen=True)
class CPUGroups:
    """Where each adapter's tokens are: long runs in place, the rest gathered in adapter order."""

    spans: tuple[tuple[int, int, int], ...]  # (slot, start, end) in token order, each at least MIN_SPAN long
    order: torch.Tensor  # [N] int64: the other tokens with an adapter, grouped by slot
    sorted_slots: torch.Tensor  # [N] int64: the slot of each token in ``order``
    runs: tuple[tuple[int, int, int], ...]  # (slot, start, end) in ``order``, one per slot present

    @classmethod
    def of(cls, token_slots: torch.Tensor) -> CPUGroups:
        slots, counts = torch.unique_consecutive(token_slots, return_counts=True)
        adapter_runs = slots >= 0
        if int(adapter_runs.sum()) <= torch.unique(slots[adapter_runs]).numel() + EXTRA_RUNS:
            long = adapter_runs
        else:
            long = (counts >= MIN_SPAN) & adapter_runs
        ends = counts.cumsum(0)
        spans = tuple(zip(slots[long].tolist(), (ends - counts)[long].tolist(), ends[long].tolist()))
        scattered = torch.nonzero((token_slots >= 0) & ~long.repeat_interleave(counts)).flatten()
        order = scattered[torch.argsort(token_slots[scattered], stable=True)]
        sorted_slots = token_slots[order]
        run_slots, run_counts = torch.unique_consecutive(sorted_slots, return_counts=True)
        run_ends = run_counts.cumsum(0)
        runs = tuple(zip(run_slots.tolist(), (run_ends - run_counts).tolist(), run_ends.tolist()))
        return cls(spans, order, sorted_slots, runs)


def lora_shrink_cpu(x: torch.Tensor, lora_a: torch.Tensor, groups: CPUGroups, scale: float = 1.0) -> torch.Tensor:
    """``lora_shrink`` (kernels/lora.py) over the step's ``CPUGroups``."""
    y = torch.zeros(x.shape[0], lora_a.shape[1], dtype=x.dtype, device=x.device)
    a_t = lora_a.transpose(1, 2)  # one view for all slots: a decode step makes hundreds of these matmuls
    for slot, start, end in groups.spans:
        torch.mm(x[start:end], a_t[slot], out=y[start:end])
    if groups.runs:
        rows = x.index_select(0, groups.order)
        sorted_y = torch.empty(rows.shape[0], lora_a.shape[1], dtype=x.dtype, device=x.device)
        for slot, start, end in groups.runs:
            torch.mm(rows[start:end], a_t[slot], out=sorted_y[start:end])
        y.index_copy_(0, groups.order, sorted_y)
    return y.mul_(scale) if scale != 1.0 else y


def lora_expand_cpu(y: torch.Tensor, lora_b: torch.Tensor, groups: CPUGroups, out: torch.Tensor,
                    scaling: torch.Tensor) -> None:
    """``lora_expand`` (kernels/lora.py) over the step's ``CPUGroups``; ``out`` may be a column slice."""
    factors = scaling.tolist()
    b_t = lora_b.transpose(1, 2)
    for slot, start, end in groups.spans:
        out[start:end].addmm_(y[start:end], b_t[slot], alpha=factors[slot])
    if groups.runs:
        # Each row scaled by its slot's factor before the matmuls: one multiply for all slots.
        rows = y.index_select(0, groups.order) * scaling.to(y.dtype)[groups.sorted_slots, None]
        delta = torch.empty(rows.shape[0], lora_b.shape[1], dtype=out.dtype, device=out.device)
        for slot, start, end in groups.runs:
            torch.mm(rows[start:end], b_t[slot], out=delta[start:end])
        # index_put_ with accumulate scatters into a column slice 3x faster than index_add_ does.
        out.index_put_((groups.order,), delta, accumulate=True)
