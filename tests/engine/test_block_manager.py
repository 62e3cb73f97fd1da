"""The block pool: reference counts, the prefix-hash chain and least-recently-freed eviction."""

from __future__ import annotations

from bulkinfer import SamplingParams
from bulkinfer.engine.block_manager import BlockManager
from bulkinfer.engine.sequence import Sequence


def seq(tokens: list[int], **params) -> Sequence:
    return Sequence("r", 0, tokens, SamplingParams(**params), None)


def run_prefill(manager: BlockManager, sequence: Sequence) -> int:
    num_new = manager.admit(sequence, 10_000)
    sequence.num_computed_tokens += num_new
    return num_new


def test_shared_prefix_reuses_full_blocks_and_counts_refs():
    manager = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    a, b = seq(list(range(10))), seq(list(range(8)) + [99, 98, 97])
    assert run_prefill(manager, a) == 10
    assert run_prefill(manager, b) == 3  # two full blocks (8 tokens) came from the cache
    assert a.block_table[:2] == b.block_table[:2] and a.block_table[2] != b.block_table[2]
    assert [manager.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]
    manager.free(a)
    manager.free(b)
    assert manager.num_free_blocks == 8


def test_last_token_is_always_computed():
    manager = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    run_prefill(manager, seq(list(range(8))))
    again = seq(list(range(8)))
    assert run_prefill(manager, again) == 4  # block 2 holds the last token: recomputed, not shared
    assert again.num_cached_tokens == 4


def test_freed_blocks_stay_findable_until_evicted_oldest_first():
    manager = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=True)
    first, second = seq(list(range(5))), seq(list(range(100, 105)))
    for sequence in (first, second):
        run_prefill(manager, sequence)
        manager.free(sequence)
    # Two free unhashed blocks are taken before any hashed one; then the oldest hashed one goes.
    filler = seq(list(range(200, 212)))
    run_prefill(manager, filler)
    manager.free(filler)
    assert run_prefill(manager, seq(list(range(100, 105)))) == 1  # still cached
    assert run_prefill(manager, seq(list(range(5)))) == 5  # evicted


def test_no_cache_hits_when_disabled_or_prompt_logprobs_wanted():
    for manager, extra in ((BlockManager(8, 4, False), {}), (BlockManager(8, 4, True), {"prompt_logprobs": 1})):
        run_prefill(manager, seq(list(range(9))))
        assert run_prefill(manager, seq(list(range(9)), **extra)) == 9


def test_admit_takes_nothing_when_blocks_are_short():
    manager = BlockManager(num_blocks=3, block_size=4, enable_prefix_caching=True)
    run_prefill(manager, seq(list(range(8))))
    late = seq(list(range(50, 60)))
    assert manager.admit(late, 10_000) == 0
    assert late.block_table == [] and manager.num_free_blocks == 1
