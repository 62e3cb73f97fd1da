"""Sliding-window and soft-capped attention in the reference, against attention written out per token.

The oracle follows transformers' eager attention: scores scaled, capped as ``c * tanh(s / c)``,
then masked (causal, and ``key > query - window``), softmax, values. Rows mix decode, fresh prefill
and extends over a cached prefix, with windows shorter and longer than the contexts.
"""

from __future__ import annotations

import pytest
import torch

from kernel_testing import make_batch

from bulkinfer.kernels.paged_attention import paged_attention_ref

ROWS = [(1, 1), (1, 17), (1, 50), (16, 16), (37, 37), (5, 20), (16, 50)]


def attention_written_out(batch: dict, sliding_window: int, softcap: float) -> torch.Tensor:
    query, k_cache, v_cache = batch["query"], batch["k_cache"], batch["v_cache"]
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
            key_pos = torch.arange(seq_len)
            visible = (key_pos <= pos) & ((key_pos > pos - sliding_window) if sliding_window else True)
            weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
            out[token] = (weights[:, :, None] * values.transpose(0, 1)).sum(1)
    return out


@pytest.mark.parametrize("sliding_window,softcap", [(0, 0.0), (4, 0.0), (16, 0.0), (1, 0.0), (0, 5.0), (7, 2.0)])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (8, 2)])
def test_reference_variants(num_heads, num_kv_heads, sliding_window, softcap):
    batch = make_batch(ROWS, num_heads, num_kv_heads, 32, torch.float32, seed=3)
    batch = {k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}
    expected = attention_written_out(batch, sliding_window, softcap)
    actual = paged_attention_ref(**batch, sliding_window=sliding_window, softcap=softcap)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_a_window_changes_the_result():
    batch = make_batch([(1, 50), (16, 50)], 2, 2, 32, torch.float32, seed=4)
    batch = {k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}
    assert not torch.allclose(paged_attention_ref(**batch, sliding_window=8), paged_attention_ref(**batch))
    assert not torch.allclose(paged_attention_ref(**batch, softcap=1.0), paged_attention_ref(**batch))
