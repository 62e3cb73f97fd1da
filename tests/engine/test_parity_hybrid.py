"""Hybrid models (Qwen3-Next, Qwen3.5 dense and MoE: gated delta-net layers beside gated attention; Granite 4.0-H
with and without experts: Mamba2 layers beside attention; LFM2 dense and MoE: short convolutions beside attention)
against transformers on tiny checkpoints, in fp32: their recurrent state lives in the engine's state pool."""

from __future__ import annotations

import pytest

from bulkinfer import LLM, SamplingParams
from bulkinfer.cli.kv_footprint import kv_cache_line
from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.state_pool import NO_PREFIX_CACHING
from checkpoints import HYBRID_ARCHS
from test_invariance import random_prompts, token_ids
from test_parity import PROMPT_LENGTHS, assert_greedy_matches, check_against_transformers, hf_model

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.mark.parametrize("arch", HYBRID_ARCHS)
def test_logits_and_greedy_match_transformers(checkpoint_factory, arch):
    """Last-position logits of prompts of 1 to 100 tokens, then all of them generated together (a batch of
    sequences of different lengths, decoding with one batched state update per layer). transformers runs the
    delta rule and the Mamba2 scan in chunks, summing in another order than ours: 2e-4 in fp32."""
    check_against_transformers(checkpoint_factory(arch), block_size=8, num_prompts=len(PROMPT_LENGTHS), max_tokens=8,
                               atol=2e-4)


@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5", "granite_h", "lfm2"])
def test_greedy_matches_with_chunked_prefill_and_preemption(checkpoint_factory, arch):
    """7-token steps (each prompt's state carried from chunk to chunk) and 16 blocks of 4 tokens for eight
    requests of up to 46 tokens (preemption frees the slot, and the recomputed sequence rebuilds its state)."""
    path = checkpoint_factory(arch)
    prompts = random_prompts(8, 20, 40, seed=3)
    llm = LLM(str(path), dtype="float32", block_size=4, max_model_len=64, max_num_batched_tokens=7, num_kv_blocks=16,
              max_num_seqs=4)
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert llm.stats.preemptions > 0
    assert_greedy_matches(hf_model(path), prompts, outputs)
    assert all(len(tokens) == GREEDY.max_tokens for tokens in token_ids(outputs))
    assert llm.scheduler.state_slots.num_free == 4  # every slot back in the pool


@pytest.mark.parametrize("arch", ["qwen3_5", "lfm2"])
def test_prefix_caching_is_off_with_its_reason(checkpoint_factory, arch):
    """Shared prefixes get no cache hits (the state after them is not kept), and the stats say why."""
    path = checkpoint_factory(arch)
    shared = random_prompts(1, 20, 21, seed=2)[0]
    prompts = [shared + tail for tail in random_prompts(3, 3, 6, seed=4)]
    llm = LLM(str(path), dtype="float32", block_size=4, max_model_len=64, enable_prefix_caching=True)
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert llm.stats.prefix_cache_hit_tokens == 0 and llm.stats.prefix_caching_off == NO_PREFIX_CACHING
    assert_greedy_matches(hf_model(path), prompts, outputs)


def test_slots_bound_the_running_sequences(checkpoint_factory):
    """Two slots for five requests: the rest wait for a slot, and every output still matches."""
    path = checkpoint_factory("qwen3_5")
    prompts = random_prompts(5, 3, 12, seed=5)
    llm = LLM(str(path), dtype="float32", block_size=4, max_model_len=64, max_num_seqs=2)
    assert llm.runner.state_pool.num_slots == 2
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert_greedy_matches(hf_model(path), prompts, outputs)
    assert llm.scheduler.state_slots.num_free == 2


def test_inspect_counts_kv_bytes_of_the_attention_layers_only(checkpoint_factory):
    """`bulkinfer inspect`'s KV line agrees with the engine: one attention layer of four holds a cache."""
    path = checkpoint_factory("qwen3_5")
    llm = LLM(str(path), dtype="float32", block_size=4, max_model_len=64, max_num_seqs=2)
    line = kv_cache_line(str(path), EngineConfig(dtype="float32"))
    assert line == f"float32, {llm.runner.kv_bytes_per_token:,} bytes per token"
    assert llm.runner.kv_bytes_per_token == 2 * 1 * 2 * 16 * 4  # keys and values, 1 layer, 2 heads of 16, fp32
