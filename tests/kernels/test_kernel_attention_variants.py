"""Sliding-window, soft-capped and sink attention in the Triton kernels, against paged_attention_ref
and (sinks) attention written out per token.

Batches mix decode, fresh prefill and extend rows (see test_kernel_paged_attention.py); windows go
from 1 key to more than any context, across the kernels' key slice (BLOCK_N: 32 in the
interpreter, 32-64 on a GPU). Keys wholly before a window must not even be read: they are
poisoned with NaN, which any load that reached the output would spread.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, assert_close, attention_written_out, make_batch, random_sinks

from bulkinfer.kernels.paged_attention import (
    attention_tiles,
    paged_attention_ref,
    paged_attention_triton,
)
from bulkinfer.kernels.target import device_target

MIXED = [(1, 17), (9, 9), (1, 1), (4, 33), (0, 5), (1, 64), (20, 45), (1, 31), (40, 100), (1, 200)]
FP32, FP16 = torch.float32, torch.float16


def case(heads, kv_heads, head_dim, dtype, window, softcap, splits=1, invariant=False):
    label = f"g{heads // kv_heads}-d{head_dim}-{str(dtype)[6:]}-w{window}-c{softcap:g}-s{splits}" + (
        "-inv" if invariant else "")
    return pytest.param(heads, kv_heads, head_dim, dtype, window, softcap, splits, invariant, id=label)


CASES = [
    case(2, 2, 64, FP32, 5, 0.0),  # a window inside one key slice
    case(8, 2, 64, FP16, 40, 0.0, splits=3),  # wider than a slice, narrower than most contexts
    case(8, 1, 128, FP32, 1, 0.0, splits=3),  # each token sees itself alone
    case(8, 2, 128, FP16, 300, 0.0),  # wider than every context: plain causal attention
    case(2, 2, 128, FP32, 0, 3.0, splits=3),
    case(8, 1, 64, FP16, 0, 30.0),  # Gemma 2's cap, rarely reached by these scores
    case(8, 2, 64, FP32, 7, 2.0, splits=3),
    case(8, 1, 128, FP16, 33, 1.0),
    case(8, 2, 64, FP32, 5, 0.0, invariant=True),
    case(2, 2, 128, FP16, 40, 2.0, invariant=True),
    case(8, 1, 64, FP32, 0, 3.0, invariant=True),
]


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,dtype,window,softcap,num_splits,batch_invariant", CASES)
def test_variants_on_a_mixed_batch(num_heads, num_kv_heads, head_dim, dtype, window, softcap, num_splits,
                                   batch_invariant):
    batch = make_batch(MIXED, num_heads, num_kv_heads, head_dim, dtype, seed=7)
    expected = paged_attention_ref(**batch, sliding_window=window, softcap=softcap)
    actual = paged_attention_triton(**batch, sliding_window=window, softcap=softcap, num_splits=num_splits,
                                    batch_invariant=batch_invariant)
    assert_close(actual, expected)


SINK_CASES = [
    pytest.param(8, 2, 64, FP32, 0, 1, False, id="g4-unsplit"),
    pytest.param(8, 2, 64, FP16, 0, 3, False, id="g4-fp16-split"),  # the sink joins at the merge, once
    pytest.param(8, 1, 64, FP32, 40, 3, False, id="g8-window-split"),  # gpt-oss's sliding layers, and splits
    pytest.param(2, 2, 128, FP16, 5, 1, True, id="mha-window-invariant"),
    pytest.param(8, 2, 64, FP32, 0, 1, True, id="g4-invariant"),
]


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,dtype,window,num_splits,batch_invariant", SINK_CASES)
def test_sinks_on_a_mixed_batch(num_heads, num_kv_heads, head_dim, dtype, window, num_splits, batch_invariant):
    batch = make_batch(MIXED, num_heads, num_kv_heads, head_dim, dtype, seed=9)
    sinks = random_sinks(num_heads).to(DEVICE)
    expected = attention_written_out(batch, window, sinks=sinks)
    actual = paged_attention_triton(**batch, sliding_window=window, num_splits=num_splits,
                                    batch_invariant=batch_invariant, sinks=sinks)
    assert_close(actual, expected)


def poison_before(batch: dict, firsts: list[int]) -> dict:
    """The batch with NaN keys and values at each sequence's positions below ``firsts[i]``."""
    k_cache, v_cache = batch["k_cache"].clone(), batch["v_cache"].clone()
    block_size = k_cache.shape[1]
    for i, first in enumerate(firsts):
        for pos in range(first):
            block = int(batch["block_tables"][i, pos // block_size])
            k_cache[block, pos % block_size] = float("nan")
            v_cache[block, pos % block_size] = float("nan")
    return dict(batch, k_cache=k_cache, v_cache=v_cache)


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_keys_before_the_window_are_not_read(batch_invariant):
    window, dtype = 6, torch.float32
    block_n = attention_tiles(64, dtype, device_target(DEVICE)).block_n
    # Decode rows and extends of one query tile each: every row's window starts past several slices.
    rows = [(1, 5 * block_n + 3), (1, 3 * block_n), (4, 4 * block_n + 9), (3, 2 * block_n + 1)]
    batch = make_batch(rows, 4, 2, 64, dtype, seed=8)
    expected = paged_attention_ref(**batch, sliding_window=window)
    firsts = [(seq_len - q_len + 1 - window) // block_n * block_n for q_len, seq_len in rows]
    assert min(firsts) >= block_n
    actual = paged_attention_triton(**poison_before(batch, firsts), sliding_window=window, num_splits=2,
                                    batch_invariant=batch_invariant)
    assert_close(actual, expected)


def test_negative_variants_are_refused():
    batch = make_batch([(1, 5)], 2, 2, 64, torch.float32)
    with pytest.raises(ValueError, match="must be >= 0"):
        paged_attention_triton(**batch, sliding_window=-1)
