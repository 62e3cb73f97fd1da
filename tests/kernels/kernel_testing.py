"""What every kernel test shares: the device, the dtypes worth testing there, tolerances,
random attention batches over a paged cache, and attention written out per token to check them by."""

from __future__ import annotations

import os

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu")

# The interpreter computes bf16 wrongly (seen with tl.dot), so bf16 is tested on the GPU only.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.type == "cuda" else [])
DTYPE_PARAMS = [pytest.param(dtype, id=str(dtype).removeprefix("torch.")) for dtype in DTYPES]

_TOLERANCE = {  # (atol, rtol): a few units in the last place of each dtype, after fp32 accumulation
    torch.float32: (1e-4, 1e-4),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3e-2, 3e-2),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    atol, rtol = _TOLERANCE[expected.dtype]
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


def make_batch(rows: list[tuple[int, int]], num_heads: int, num_kv_heads: int, head_dim: int,
               dtype: torch.dtype, block_size: int = 16, seed: int = 0) -> dict:
    """Random queries and cache for ``rows`` of (q_len, seq_len), blocks shuffled over the pool."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-seq_len // block_size) for _, seq_len in rows]
    max_blocks = max(blocks_per_seq) + 1  # one spare column: padded tables are the engine's normal case
    pool = 2 * sum(blocks_per_seq) + 3
    order = torch.randperm(pool, generator=gen)
    tables = torch.zeros(len(rows), max_blocks, dtype=torch.int32)
    used = 0
    for i, count in enumerate(blocks_per_seq):
        tables[i, :count] = order[used:used + count]
        used += count
    q_lens = torch.tensor([q for q, _ in rows])
    cache_shape = (pool, block_size, num_kv_heads, head_dim)
    batch = dict(
        query=torch.randn(int(q_lens.sum()), num_heads, head_dim, generator=gen),
        k_cache=torch.randn(cache_shape, generator=gen),
        v_cache=torch.randn(cache_shape, generator=gen),
        query_start_loc=torch.cat([torch.zeros(1, dtype=torch.long), q_lens.cumsum(0)]).int(),
        seq_lens=torch.tensor([s for _, s in rows], dtype=torch.int32),
        block_tables=tables,
        scale=head_dim ** -0.5,
    )
    return {k: v.to(DEVICE, dtype if v.is_floating_point() else None) if torch.is_tensor(v) else v
            for k, v in batch.items()}


def attention_written_out(batch: dict, sliding_window: int = 0, softcap: float = 0.0,
                          sinks: torch.Tensor | None = None) -> torch.Tensor:
    """transformers' eager attention, one token at a time, in fp32 (returned in the query's dtype)."""
    query, k_cache, v_cache = (batch[name].float() for name in ("query", "k_cache", "v_cache"))
    block_size, group = k_cache.shape[1], query.shape[1] // k_cache.shape[2]
    starts, lens = batch["query_start_loc"].tolist(), batch["seq_lens"].tolist()
    out = torch.empty_like(query)
    for i, seq_len in enumerate(lens):
        slots = [int(batch["block_tables"][i, p // block_size]) * block_size + p % block_size for p in range(seq_len)]
        keys = k_cache.flatten(0, 1)[slots].repeat_interleave(group, dim=1)  # [seq_len, heads, dim]
        values = v_cache.flatten(0, 1)[slots].repeat_interleave(group, dim=1)
        for token in range(starts[i], starts[i + 1]):
            pos = seq_len - (starts[i + 1] - token)
            scores = (query[token][:, None, :] * keys.transpose(0, 1)).sum(-1) * batch["scale"]  # [heads, seq_len]
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)
            key_pos = torch.arange(seq_len, device=query.device)
            visible = (key_pos <= pos) & ((key_pos > pos - sliding_window) if sliding_window else True)
            scores = scores.masked_fill(~visible, float("-inf"))
            if sinks is not None:
                scores = torch.cat([scores, sinks.to(scores)[:, None]], dim=-1)
            weights = scores.softmax(-1)[:, :seq_len]
            out[token] = (weights[:, :, None] * values.transpose(0, 1)).sum(1)
    return out.to(batch["query"].dtype)


def random_sinks(num_heads: int, seed: int = 5) -> torch.Tensor:
    """Sink logits about as large as the scores, so they change the weights without swamping them."""
    return torch.randn(num_heads, generator=torch.Generator().manual_seed(seed)) * 2
