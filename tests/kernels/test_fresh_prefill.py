"""Prefill attention over the step's own new keys against reading them back from the paged cache.

A sequence whose whole context is new in a step attends to the keys and values the step computed;
every other row (a chunk after a cached prefix, a decode) reads the cache. Both must give the same
result, and the fresh rows must not read the cache at all.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from kernel_testing import make_batch

from bulkinfer import LLM
from bulkinfer.kernels import paged_attention
from bulkinfer.kernels.fp8 import quantize
from bulkinfer.kernels.paged_attention_cpu import paged_attention_cpu

FRESH = [(17, 17), (5, 5), (48, 48)]  # (q_len, seq_len): the whole context is new
CACHED_PREFIX = [(9, 40)]
DECODES = [(1, 30), (1, 1)]
ROWS = [FRESH[0], DECODES[0], CACHED_PREFIX[0], FRESH[1], DECODES[1], FRESH[2]]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def new_keys_and_values(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """[num_tokens, kv_heads, dim] each: the cache rows of every sequence's new tokens, as store_kv left them."""
    starts, lens = batch["query_start_loc"].tolist(), batch["seq_lens"].tolist()
    block_size = batch["k_cache"].shape[1]
    slots = []
    for seq, (start, end) in enumerate(itertools.pairwise(starts)):
        table = batch["block_tables"][seq].long()
        for position in range(lens[seq] - (end - start), lens[seq]):
            slots.append(int(table[position // block_size]) * block_size + position % block_size)
    rows = torch.tensor(slots)
    return tuple(cache.flatten(0, 1)[rows] for cache in (batch["k_cache"], batch["v_cache"]))


@pytest.fixture
def gathers(monkeypatch) -> list[tuple[int, int]]:
    """(table dims, tokens) of every read of the cache by the reference: 1-D tables are one sequence's."""
    calls, real = [], paged_attention.gather_rows

    def spy(cache, block_table, num_tokens, scale, dtype):
        calls.append((block_table.dim(), num_tokens))
        return real(cache, block_table, num_tokens, scale, dtype)

    monkeypatch.setattr(paged_attention, "gather_rows", spy)
    return calls


def attend(batch: dict, **kwargs) -> torch.Tensor:
    args = [batch[name] for name in ("query", "k_cache", "v_cache", "query_start_loc", "seq_lens", "block_tables")]
    return paged_attention_cpu(*args, batch["scale"], **kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("num_heads, num_kv_heads", [(8, 2), (4, 4)], ids=["gqa4", "mha"])
@pytest.mark.parametrize("variant", [{}, {"sliding_window": 7}, {"softcap": 2.0}], ids=["plain", "window", "softcap"])
def test_fresh_sequences_attend_to_their_new_keys_not_the_cache(gathers, dtype, num_heads, num_kv_heads, variant):
    batch = make_batch(ROWS, num_heads, num_kv_heads, 64, dtype)
    key, value = new_keys_and_values(batch)
    with torch.inference_mode():
        read_back = attend(batch, **variant)
        assert {tokens for dims, tokens in gathers if dims == 1} == {n for _, n in FRESH + CACHED_PREFIX}
        gathers.clear()
        fresh = attend(batch, key=key, value=value, **variant)
    assert {tokens for dims, tokens in gathers if dims == 1} == {n for _, n in CACHED_PREFIX}
    assert any(dims == 2 for dims, _ in gathers)  # the decode rows still read the cache
    torch.testing.assert_close(fresh, read_back, atol=TOLERANCE[dtype], rtol=TOLERANCE[dtype])


def test_an_fp8_cache_is_read_back_even_for_fresh_sequences(gathers):
    # Its keys are rounded to e4m3: a prompt reads the same rounded keys its later decodes will.
    batch = make_batch(ROWS, 8, 2, 64, torch.float32)
    key, value = new_keys_and_values(batch)
    batch.update(k_cache=quantize(batch["k_cache"], 0.5), v_cache=quantize(batch["v_cache"], 0.5))
    with torch.inference_mode():
        expected = attend(batch, k_scale=0.5, v_scale=0.5)
        gathers.clear()
        out = attend(batch, key=key, value=value, k_scale=0.5, v_scale=0.5)
    assert {tokens for dims, tokens in gathers if dims == 1} == {n for _, n in FRESH + CACHED_PREFIX}
    assert torch.equal(out, expected)


@pytest.mark.parametrize("model_impl", ["native", "transformers"])
def test_the_engine_hands_its_new_keys_to_prefill(checkpoint_factory, gathers, model_impl):
    # Prompts of one step each, no shared prefix: every prefill is fresh, and nothing reads the cache back.
    llm = LLM(str(checkpoint_factory("llama")), dtype="float32", model_impl=model_impl, pooling="mean",
              max_model_len=128,
              attention_backend="auto")
    outputs = llm.embed([[5, 6, 7, 8], list(range(100, 140))], use_tqdm=False)
    assert all(output.error is None for output in outputs)
    assert gathers == []
