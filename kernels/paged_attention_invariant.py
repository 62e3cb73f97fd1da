"""Batch-invariant attention on the CPU: each new token's result depends on its own sequence alone.

The reference and the CPU path give a token bits that depend on its company: decode rows are
padded to their group's longest sequence, a prefill chunk's scores go through matmuls whose
blocking follows the chunk's length, and softmax sums run over rows of varying width. Here a
sequence's new tokens go in tiles of exactly TILE rows (the last padded), and every tile folds its
sequence's cache one KV block at a time from block 0 with an online softmax (as the Triton extend
kernel does on a GPU). Each block's two products are batched matmuls of one shape, always
TILES_PER_CALL tiles of [TILE x group, head_dim] by [head_dim, block_size] (CPU BLAS picks its
kernel by the batch's size as well as the matrices'), so a token gets the same additions in the
same order whether it is prefilled alone, in a chunk, in a mixed batch or after a preemption;
blocks past a token's position are fully masked and add exact zeros. A decode row costs a padded
tile of TILE rows: deterministic mode is several times slower on the CPU (docs/benchmarks.md).

A sliding window and a soft-cap (see paged_attention.py) change only the mask and the scores, and
sinks only each row's final denominator. With
a window, each call starts at the first block any of its tiles' windows reaches: blocks before a
token's own window are fully masked for it and add exact zeros, so where the fold starts does not
change its bits.

An FP8 cache's blocks are dequantized as they are read, with the layer's scales (see fp8.py).
"""

from __future__ import annotations

import torch

from .fp8 import read_rows

TILE = 4  # new tokens per tile: a decode row pads 3 rows, not 15
TILES_PER_CALL = 32  # tiles per batched matmul, padded: one shape for every call


def paged_attention_invariant(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
    *,
    sliding_window: int = 0,
    softcap: float = 0.0,
    k_scale: float = 1.0,  # the layer's FP8 scales; unused with a cache of the compute dtype
    v_scale: float = 1.0,
    sinks: torch.Tensor | None = None,  # [num_heads] float32 sink logits, or None
    **hints,  # paged_attention_ref's launch hints and new keys: every key is read from the cache, so a
    # prompt's first chunk folds the same rows as its later chunks do
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    num_tokens, num_heads, head_dim = query.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // kv_heads
    if num_tokens == 0:
        return torch.empty_like(query)
    rows, positions, tile_seqs = _tiles(query_start_loc.tolist(), seq_lens.tolist())
    device = query.device
    rows_t = torch.tensor(rows, device=device)  # [tiles, TILE]: token index, or num_tokens for padding
    positions_t = torch.tensor(positions, device=device)  # [tiles, TILE]: each row's position
    tables = block_tables.long()[torch.tensor(tile_seqs, device=device)]  # [tiles, max_blocks]
    blocks = (seq_lens.long()[torch.tensor(tile_seqs, device=device)] + block_size - 1) // block_size
    first_blocks = torch.zeros_like(blocks)  # where each tile's fold may start: its first row's window
    if sliding_window:
        first_blocks = (positions_t[:, 0] + 1 - sliding_window).clamp(min=0) // block_size
    padded = torch.cat([query.float(), query.new_zeros(1, num_heads, head_dim, dtype=torch.float32)])
    # [tiles, kv_heads, TILE * group, dim]: rows are (token, head of the group), token-major.
    q = padded[rows_t].view(-1, TILE, kv_heads, group, head_dim).permute(0, 2, 1, 3, 4).reshape(
        -1, kv_heads, TILE * group, head_dim)
    row_positions = positions_t.repeat_interleave(group, dim=1)[:, None, :, None]  # [tiles, 1, TILE*group, 1]
    calls = [slice(i, i + TILES_PER_CALL) for i in range(0, q.shape[0], TILES_PER_CALL)]
    row_sinks = None if sinks is None else sinks.float().view(kv_heads, 1, group).expand(
        kv_heads, TILE, group).reshape(kv_heads, TILE * group)  # each row's head's sink, rows as in q
    out = torch.cat([_fold(q[c], row_positions[c], tables[c], range(int(first_blocks[c].min()), int(blocks[c].max())),
                           k_cache, v_cache, scale, sliding_window, softcap, k_scale, v_scale, row_sinks)
                     for c in calls])
    out = out.view(-1, kv_heads, TILE, group, head_dim).permute(0, 2, 1, 3, 4).reshape(-1, num_heads, head_dim)
    result = torch.empty_like(query)
    real = rows_t.view(-1) < num_tokens
    result[rows_t.view(-1)[real]] = out[real].to(query.dtype)
    return result


def _fold(q: torch.Tensor, row_positions: torch.Tensor, tables: torch.Tensor, blocks: range,
          k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float, sliding_window: int = 0,
          softcap: float = 0.0, k_scale: float = 1.0, v_scale: float = 1.0,
          row_sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of up to TILES_PER_CALL tiles, padded to exactly that many: every batched matmul
    then has one shape, and CPU BLAS picks its kernel by the batch's size too."""
    count = q.shape[0]
    if count < TILES_PER_CALL:
        extra = TILES_PER_CALL - count
        q = torch.cat([q, q.new_zeros(extra, *q.shape[1:])])
        row_positions = torch.cat([row_positions, row_positions.new_zeros(extra, *row_positions.shape[1:])])
        tables = torch.cat([tables, tables.new_zeros(extra, tables.shape[1])])
    block_size = k_cache.shape[1]
    m = torch.full(q.shape[:-1], float("-inf"), device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros_like(q)
    slots = torch.arange(block_size, device=q.device)
    for block in blocks:
        ids = tables[:, block]
        k = read_rows(k_cache[ids], k_scale, torch.float32)
        k = k.permute(0, 2, 3, 1).contiguous()  # [tiles, kv_heads, dim, block_size]
        scores = torch.matmul(q, k) * scale  # [tiles, kv_heads, TILE * group, block_size]
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        hidden = block * block_size + slots > row_positions
        if sliding_window:
            hidden |= block * block_size + slots <= row_positions - sliding_window
        scores = scores.masked_fill(hidden, float("-inf"))
        m_new = torch.maximum(m, scores.amax(-1))
        # A row whose window starts past this block has seen no key (m = -inf): shifted by 0 it adds zeros.
        shift = m_new.masked_fill(m_new == float("-inf"), 0.0)
        p = (scores - shift[..., None]).exp()
        alpha = (m - shift).exp()
        v = read_rows(v_cache[ids], v_scale, torch.float32)
        v = v.permute(0, 2, 1, 3).contiguous()  # [tiles, kv_heads, block_size, dim]
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + torch.matmul(p, v)
        m = m_new
    if row_sinks is not None:  # [kv_heads, TILE * group]: joins each row's denominator, adds no value
        top = torch.maximum(m, row_sinks)
        alpha = (m - top).exp()
        l, acc = l * alpha + (row_sinks - top).exp(), acc * alpha[..., None]
    return (acc / l[..., None])[:count]


def _tiles(starts: list[int], lens: list[int]) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Each sequence's new tokens in tiles of TILE: token indices (the padding index past the last
    token), positions (padding rows see position 0, so their softmax stays finite) and sequences."""
    rows, positions, seqs = [], [], []
    padding = starts[-1]
    for seq, (start, end, seq_len) in enumerate(zip(starts, starts[1:], lens)):
        context = seq_len - (end - start)
        for first in range(start, end, TILE):
            tokens = list(range(first, min(first + TILE, end)))
            rows.append(tokens + [padding] * (TILE - len(tokens)))
            positions.append([context + t - start for t in tokens] + [0] * (TILE - len(tokens)))
            seqs.append(seq)
    return rows, positions, seqs
