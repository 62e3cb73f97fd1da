"""The chunks of a prefill step, for the chunked Triton scans (gated delta rule, Mamba2).

A step concatenates several sequences' tokens (bounded by ``query_start_loc``); the chunked kernels
work on pieces of at most ``chunk`` tokens that never straddle two sequences. The layout is built
on the device with no host sync: a step of T tokens in B sequences has at most cdiv(T, chunk) + B
chunks, the grid is that bound, and the chunks past the real count are empty (start == end), so
their programs read and write nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ChunkLayout:
    starts: torch.Tensor  # [bound] int32: each chunk's first token row
    ends: torch.Tensor  # [bound] int32: one past its last (== start for an empty chunk)
    first_chunk: torch.Tensor  # [B] int32: each sequence's first chunk; its chunks follow in order

    @property
    def bound(self) -> int:
        return self.starts.shape[0]


def chunk_layout(query_start_loc: torch.Tensor, tokens: int, chunk: int) -> ChunkLayout:
    """The chunks of a step of ``tokens`` rows whose sequences ``query_start_loc`` [B + 1] bounds."""
    bounds = query_start_loc.long()
    seqs = bounds.shape[0] - 1
    counts = (bounds[1:] - bounds[:-1] + chunk - 1) // chunk
    counts_through = counts.cumsum(0)
    first = counts_through - counts
    index = torch.arange(-(-tokens // chunk) + seqs, device=bounds.device)
    seq = torch.searchsorted(counts_through, index, right=True).clamp(max=max(seqs - 1, 0))
    starts = bounds[seq] + (index - first[seq]) * chunk
    ends = torch.minimum(starts + chunk, bounds[seq + 1])
    real = index < counts_through[-1:] if seqs else torch.zeros_like(index, dtype=torch.bool)
    return ChunkLayout(torch.where(real, starts, 0).int(), torch.where(real, ends, 0).int(), first.int())
