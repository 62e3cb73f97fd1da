"""Greedy results must not depend on batching, preemption, prefix caching or chunking."""

from __future__ import annotations

import torch

from bulkinfer import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def random_prompts(count: int, low: int, high: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (count,), generator=generator).tolist()
    return [torch.randint(5, 600, (n,), generator=generator).tolist() for n in lengths]


def token_ids(outputs) -> list[list[int]]:
    return [output.outputs[0].token_ids for output in outputs]


def one_at_a_time(path, prompts, params=GREEDY) -> list[list[int]]:
    llm = LLM(str(path), dtype="float32", max_model_len=256, enable_prefix_caching=False)
    return [token_ids(llm.generate([p], params, use_tqdm=False))[0] for p in prompts]


def test_batch_of_one_equals_all_at_once(tiny_llama):
    prompts = random_prompts(12, 1, 90)
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256)
    assert token_ids(llm.generate(prompts, GREEDY, use_tqdm=False)) == one_at_a_time(tiny_llama, prompts)


def test_preemption_keeps_results(tiny_llama):
    prompts = random_prompts(10, 20, 60, seed=1)
    # 14 blocks of 8 tokens: each request fits alone, but far from all of them together.
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, num_kv_blocks=14, block_size=8)
    outputs = llm.generate(prompts, GREEDY, use_tqdm=False)
    assert llm.stats.preemptions > 0
    assert token_ids(outputs) == one_at_a_time(tiny_llama, prompts)
    assert llm.block_manager.num_free_blocks == 14  # every block came back


def test_prefix_caching_on_equals_off(tiny_llama):
    shared = random_prompts(1, 70, 71, seed=2)[0]
    prompts = [shared + tail for tail in random_prompts(8, 1, 20, seed=3)] + [shared]
    cached = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8)
    first = token_ids(cached.generate(prompts, GREEDY, use_tqdm=False))
    again = token_ids(cached.generate(prompts, GREEDY, use_tqdm=False))  # now all from the cache
    assert cached.stats.prefix_cache_hit_rate > 0.5
    uncached = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8, enable_prefix_caching=False)
    expected = token_ids(uncached.generate(prompts, GREEDY, use_tqdm=False))
    assert uncached.stats.prefix_cache_hit_tokens == 0
    assert first == again == expected


def test_tiny_chunked_prefill_budget(tiny_llama):
    prompts = random_prompts(6, 30, 120, seed=4)
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, max_num_batched_tokens=7, block_size=4)
    assert token_ids(llm.generate(prompts, GREEDY, use_tqdm=False)) == one_at_a_time(tiny_llama, prompts)


def test_max_num_seqs_caps_the_running_batch(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, max_num_seqs=3)
    for index, prompt in enumerate(random_prompts(8, 5, 30, seed=5)):
        llm.add_request(index, prompt, GREEDY)
    finished = []
    while llm.has_unfinished_requests():
        finished += llm.step()
        assert llm.stats.num_running <= 3
    assert sorted(output.request_id for output in finished) == list(range(8))
