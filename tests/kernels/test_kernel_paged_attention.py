"""paged_attention_triton against paged_attention_ref on batches that hit the edges.

Block size 16 unless a test says otherwise, so context lengths 1, 15, 16, 17 and 50 are one key,
block_size - 1, block_size, block_size + 1 and several blocks. Each sequence is (q_len, seq_len):
q_len == 1 is a decode row, q_len == seq_len a fresh prefill, q_len < seq_len an extend over a
prefix already in the cache (a prefix-cache hit or a later chunk of a chunked prefill).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close, make_batch  # noqa: E402

from bulkinfer.kernels.paged_attention import (  # noqa: E402
    choose_num_splits,
    paged_attention_ref,
    paged_attention_triton,
)
from bulkinfer.kernels.target import KNOWN_TARGETS, device_target  # noqa: E402

CONTEXT_EDGES = [1, 15, 16, 17, 50]
HEAD_DIMS = [64, 128, 80]
GQA = [  # (num_heads, num_kv_heads): group sizes 1, 4 and 8
    pytest.param(2, 2, id="mha"), pytest.param(8, 2, id="gqa4"), pytest.param(8, 1, id="gqa8")]


def check(batch: dict, **kwargs) -> None:
    expected = paged_attention_ref(**batch)
    actual = paged_attention_triton(**batch, **kwargs)
    assert_close(actual, expected)


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("num_heads,num_kv_heads", GQA)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_decode_rows(dtype, num_heads, num_kv_heads, head_dim, num_splits):
    # Three splits of a 1-key context leave two splits empty: the merge must weigh them as nothing.
    rows = [(1, n) for n in CONTEXT_EDGES]
    check(make_batch(rows, num_heads, num_kv_heads, head_dim, dtype), num_splits=num_splits)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("num_heads,num_kv_heads", GQA)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_prefill_and_extend_rows(dtype, num_heads, num_kv_heads, head_dim):
    rows = [(2, 2), (15, 15), (16, 16), (17, 17),  # fresh prefills around the block size
            (5, 20), (16, 50), (37, 70)]  # extends over a cached prefix, the last spanning query tiles
    check(make_batch(rows, num_heads, num_kv_heads, head_dim, dtype, seed=1))


@pytest.mark.parametrize("batch_invariant", [False, True])
@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_mixed_batch(dtype, block_size, batch_invariant):
    # Decode, prefill and extend rows interleaved, as the scheduler mixes them; a sequence with no
    # new tokens this step (q_len 0) must be skipped by both kernels.
    rows = [(1, 17), (9, 9), (1, 1), (4, 33), (0, 5), (1, 64), (20, 45), (1, 31)]
    batch = make_batch(rows, 8, 2, 64, dtype, block_size=block_size, seed=2)
    expected = paged_attention_ref(**batch)
    actual = paged_attention_triton(**batch, max_query_len=20, max_seq_len=64, num_splits=2,
                                    batch_invariant=batch_invariant)
    assert_close(actual, expected)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_many_sequences(dtype):
    # Enough sequences that finding a tile's owner takes several halvings of the binary search.
    rows = [(1 + i % 3, 1 + i % 3 + (i * 7) % 20) for i in range(37)]
    check(make_batch(rows, 4, 2, 64, dtype, seed=5), num_splits=2)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_long_decode_splits(dtype):
    batch = make_batch([(1, 300), (1, 3)], 4, 1, 64, dtype, seed=3)
    auto = choose_num_splits(2, 1, 300, device_target(DEVICE))
    assert auto > 1  # a lone long sequence must be split, here and on a GPU
    check(batch, max_query_len=1, max_seq_len=300)
    check(batch, num_splits=8)


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_split_count_heuristic(target):
    gpu = KNOWN_TARGETS[target]
    assert choose_num_splits(256, 8, 4096, gpu) == 1  # a big batch already fills the chip
    assert choose_num_splits(1, 1, 100, gpu) == 1  # too short to be worth splitting
    assert choose_num_splits(1, 8, 4096, gpu) == 16  # a lone long sequence splits to the limit
    for seqs, heads, length in [(1, 1, 10**6), (3, 2, 5000), (1, 8, 700)]:
        splits = choose_num_splits(seqs, heads, length, gpu)
        assert splits & (splits - 1) == 0 and 1 <= splits <= 16


def test_strided_query_and_empty_batch():
    batch = make_batch([(3, 10), (1, 18)], 4, 2, 64, torch.float32, seed=4)
    wide = torch.randn(batch["query"].shape[0], 4, 96, device=DEVICE)
    wide[..., :64] = batch["query"]
    batch["query"] = wide[..., :64]  # rows and heads strided, as a view of a wider projection
    check(batch)
    empty = make_batch([(1, 1)], 4, 2, 64, torch.float32)
    empty["query"] = empty["query"][:0]
    empty["query_start_loc"] = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    empty["seq_lens"] = empty["seq_lens"][:0]
    empty["block_tables"] = empty["block_tables"][:0]
    assert paged_attention_triton(**empty).shape == (0, 4, 64)


def launched(batch: dict, **hints) -> list[str]:
    from bulkinfer.kernels.paged_attention import attention_launches
    from bulkinfer.kernels.target import KNOWN_TARGETS

    out = torch.empty_like(batch["query"])
    launches = attention_launches(batch["query"], batch["k_cache"], batch["v_cache"], out, batch["query_start_loc"],
                                  batch["seq_lens"], batch["block_tables"], batch["scale"], KNOWN_TARGETS["sm_90"],
                                  **hints)
    return [launch.kernel.__name__ if hasattr(launch.kernel, "__name__") else launch.kernel.fn.__name__
            for launch in launches]


def test_each_step_launches_only_the_kernels_it_needs():
    prefill = make_batch([(5, 5), (3, 20)], 4, 2, 64, torch.float32)
    assert launched(prefill, max_query_len=5, min_query_len=3) == ["_extend_kernel"]
    decode = make_batch([(1, 5), (1, 20)], 4, 2, 64, torch.float32)
    assert launched(decode, max_query_len=1, min_query_len=1, num_splits=1) == ["_decode_kernel"]
    assert launched(decode, max_query_len=1, min_query_len=1, num_splits=4) == ["_decode_kernel",
                                                                                "_merge_splits_kernel"]
    # Batch-invariant: every row through the extend kernel, decode rows too.
    assert launched(decode, max_query_len=1, min_query_len=1, batch_invariant=True) == ["_extend_kernel"]
