"""model_impl="transformers": transformers' model code on bulkinfer's paged cache, scheduler and sampler.

Parity across architectures bulkinfer has no code for is tested where the tiny checkpoints of those
architectures are built; here the path itself: its choice, its agreement with the native code on the
same checkpoint, and what it refuses.
"""

from __future__ import annotations

import pytest
from test_parity import check_against_transformers

from bulkinfer import LLM, SamplingParams


def test_auto_takes_native_code_where_it_exists(tiny_llama):
    assert LLM(str(tiny_llama), dtype="float32", num_kv_blocks=8).stats.model_impl == "native"


def test_a_native_architecture_through_transformers_matches_transformers(tiny_llama):
    llm = check_against_transformers(tiny_llama, block_size=8, num_prompts=8, max_tokens=8,
                                     model_impl="transformers", max_num_batched_tokens=16)  # chunked prefill
    assert llm.stats.model_impl == "transformers"


def test_the_two_paths_agree_with_a_shared_prefix_and_preemption(tiny_llama):
    prefix = list(range(10, 50))
    prompts = [prefix + [60 + i] * (i + 1) for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=12, logprobs=2, ignore_eos=True)
    llms = [LLM(str(tiny_llama), dtype="float32", model_impl=impl, block_size=8, num_kv_blocks=10)
            for impl in ("native", "transformers")]
    native, hf = (llm.generate(prompts, params, use_tqdm=False) for llm in llms)
    assert all(llm.stats.preemptions > 0 and llm.stats.prefix_cache_hit_tokens > 0 for llm in llms)
    for a, b in zip(native, hf):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        for x, y in zip(a.outputs[0].logprobs, b.outputs[0].logprobs):
            assert {t: lp.logprob for t, lp in x.items()} == pytest.approx({t: lp.logprob for t, lp in y.items()},
                                                                           abs=1e-4)


@pytest.mark.parametrize("option, value", [("tensor_parallel_size", 2), ("deterministic", True)])
def test_what_needs_native_code_is_refused_in_one_line(tiny_llama, option, value):
    with pytest.raises(ValueError) as info:
        LLM(str(tiny_llama), dtype="float32", model_impl="transformers", **{option: value})
    assert "\n" not in str(info.value) and "native code" in str(info.value)
