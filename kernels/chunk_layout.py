"""The chunks of a prefill step, for the chunked Triton scans (gated delta rule, Mamba2).

A step concatenates several sequences' tokens (bounded by ``query_start_loc``); the chunked kernels
work on pieces of at most ``chunk`` tokens that never straddle two sequences. The layout is built
on the device with no host sync: a step of T tokens in B sequences has at most cdiv(T, chunk) + B
chunks, the grid is that bound, and the chunks past the real count are empty (start == end), so
their programs read and write nothing. The kernels read and write a chunk's rows with the two
helpers at the end, masked to the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._triton import jit, next_power_of_2, tl


@dataclass(frozen=True)
class ChunkLayout:
    starts: torch.Tensor  # [bound] int32: each chunk's first token row
    ends: torch.Tensor  # [bound] int32: one past its last (== start for an empty chunk)
    first_chunk: torch.Tensor  # [B] int32: each sequence's first chunk; its chunks follow in order

    @property
    def bound(self) -> int:
        return self.starts.shape[0]


def max_chunks(tokens: int, seqs: int, chunk: int) -> int:
    """The most chunks ``tokens`` rows in ``seqs`` sequences can make: each sequence may end in a partial one."""
    return -(-tokens // chunk) + seqs


def chunk_layout(query_start_loc: torch.Tensor, tokens: int, chunk: int) -> ChunkLayout:
    """The chunks of a step of ``tokens`` rows whose sequences ``query_start_loc`` [B + 1] bounds."""
    bounds = query_start_loc.long()
    seqs = bounds.shape[0] - 1
    counts = (bounds[1:] - bounds[:-1] + chunk - 1) // chunk
    counts_through = counts.cumsum(0)
    first = counts_through - counts
    index = torch.arange(max_chunks(tokens, seqs, chunk), device=bounds.device)
    seq = torch.searchsorted(counts_through, index, right=True).clamp(max=max(seqs - 1, 0))
    starts = bounds[seq] + (index - first[seq]) * chunk
    ends = torch.minimum(starts + chunk, bounds[seq + 1])
    real = index < counts_through[-1:] if seqs else torch.zeros_like(index, dtype=torch.bool)
    return ChunkLayout(torch.where(real, starts, 0).int(), torch.where(real, ends, 0).int(), first.int())


def chunk_precision(dtype: torch.dtype) -> tuple[int, str]:
    """(tokens per chunk, ``tl.dot`` precision) of the chunked kernels for inputs of ``dtype``. The
    products take fp32 operands. 16-bit inputs: chunks of 32, TF32 products (the inputs are exact in
    TF32, and its rounding of computed operands is no coarser than theirs). fp32 inputs: products as
    accurate as fp32 (three TF32 passes), whose extra registers need chunks of 16 not to spill."""
    return (16, "tf32x3") if dtype == torch.float32 else (32, "tf32")


def dot_tile(width: int) -> int:
    """The power-of-two tile that covers ``width``, at least ``tl.dot``'s smallest side."""
    return max(16, next_power_of_2(width))


@jit
def chunk_rows(starts_ptr, ends_ptr, chunk, CHUNK: tl.constexpr):
    """The chunk's CHUNK token rows (int64), which of them are its own, and whether it has any: a step's
    chunks are fewer than the grid, and an empty one must read no rows of a scratch it never wrote."""
    start = tl.load(starts_ptr + chunk).to(tl.int64)
    end = tl.load(ends_ptr + chunk)
    rows = start + tl.arange(0, CHUNK)
    return rows, rows < end, start < end


@jit
def load_chunk_rows(ptr, rows, row_mask, row_stride, offset, col, width, BLOCK: tl.constexpr):
    """[CHUNK, BLOCK] fp32: columns col.. of the rows' entries starting at ``offset``; zeros outside."""
    cols = col + tl.arange(0, BLOCK)
    mask = row_mask[:, None] & (cols < width)[None, :]
    return tl.load(ptr + rows[:, None] * row_stride + offset + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@jit
def store_chunk_rows(ptr, x, rows, row_mask, heads, head, col, width, BLOCK: tl.constexpr):
    """Store ``x`` [CHUNK, BLOCK] at columns col.. of ``head`` in a contiguous [T, heads, width] tensor."""
    cols = col + tl.arange(0, BLOCK)
    mask = row_mask[:, None] & (cols < width)[None, :]
    tl.store(ptr + (rows[:, None] * heads + head) * width + cols[None, :], x.to(ptr.dtype.element_ty), mask=mask)


@jit
def causal_decay(cum, CHUNK: tl.constexpr, STRICT: tl.constexpr):
    """[CHUNK, CHUNK] fp32: exp(cum[i] - cum[j]), the decay from token j to token i, where j < i (STRICT)
    or j <= i, else 0; the exponent is masked first, so no later token's growth overflows."""
    index = tl.arange(0, CHUNK)
    seen = index[:, None] > index[None, :] if STRICT else index[:, None] >= index[None, :]
    return tl.exp(tl.where(seen, cum[:, None] - cum[None, :], float("-inf")))
