"""Mixture-of-experts models (Mixtral, Qwen2-MoE, Qwen3-MoE) against transformers on tiny checkpoints, in fp32."""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM, SamplingParams
from checkpoints import MOE_ARCHS
from probes import last_logits
from test_invariance import random_prompts, token_ids
from test_parity import PROMPT_LENGTHS, assert_greedy_matches, check_against_transformers, hf_model

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_logits_and_greedy_match_transformers(checkpoint_factory, arch):
    check_against_transformers(checkpoint_factory(arch), block_size=8, num_prompts=len(PROMPT_LENGTHS),
                               max_tokens=8)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_greedy_matches_with_chunks_prefix_cache_and_preemption(checkpoint_factory, arch):
    """Shared prefixes (cache hits), 7-token steps (chunked prefill) and 20 blocks of 4 tokens for
    eight requests of up to 68 tokens (preemption): every token still transformers' argmax."""
    path = checkpoint_factory(arch)
    shared = random_prompts(1, 20, 21, seed=2)[0]
    prompts = [shared + tail for tail in random_prompts(8, 5, 40, seed=3)]
    llm = check_against_transformers(path, block_size=4, num_prompts=2, max_tokens=4, max_num_batched_tokens=7,
                                     num_kv_blocks=20, enable_prefix_caching=True)
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert llm.stats.preemptions > 0 and llm.stats.prefix_cache_hit_tokens > 0
    assert_greedy_matches(hf_model(path), prompts, outputs)
    assert all(len(tokens) == GREEDY.max_tokens for tokens in token_ids(outputs))


def test_qwen_moe_layer_pattern_and_shared_expert(checkpoint_factory):
    """decoder_sparse_step and mlp_only_layers pick the dense layers; Qwen2-MoE's shared expert is built."""
    path = checkpoint_factory("qwen2_moe", num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3])
    llm = LLM(str(path), dtype="float32", max_model_len=64)
    layers = llm.runner.model.model.layers
    assert [type(layer.mlp).__name__ for layer in layers] == ["MLP", "SparseMoeBlock", "MLP", "MLP"]
    assert layers[1].mlp.shared_expert is not None
    prompt = random_prompts(1, 30, 31, seed=5)[0]
    with torch.no_grad():
        expected = hf_model(path)(torch.tensor([prompt])).logits[0, -1]
    torch.testing.assert_close(last_logits(llm, prompt), expected, atol=1e-4, rtol=0)
