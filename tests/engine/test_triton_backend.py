"""The whole engine through the Triton kernels (interpreted on the CPU) against the PyTorch path."""

from __future__ import annotations

import pytest

from bulkinfer import LLM, SamplingParams

pytest.importorskip("triton")


def test_triton_path_gives_the_torch_paths_greedy_tokens(checkpoint_factory):
    path = checkpoint_factory("qwen3")  # q/k norm and a head_dim unlike hidden/heads
    shared = list(range(10, 30))
    prompts = [shared + [40 + i] * (i + 1) for i in range(3)] + [[7, 8, 9]]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    # A 16-token budget splits the 21+ token prompts into chunks; the second pass hits the cache.
    settings = dict(max_model_len=64, num_kv_blocks=24, block_size=8, max_num_batched_tokens=16)
    triton = LLM(str(path), attention_backend="triton", **settings)
    assert triton.runner.ops.name == "triton"
    first = [o.outputs[0].token_ids for o in triton.generate(prompts, params, use_tqdm=False)]
    again = [o.outputs[0].token_ids for o in triton.generate(prompts, params, use_tqdm=False)]
    assert triton.stats.prefix_cache_hit_tokens > 0
    torch_llm = LLM(str(path), attention_backend="torch", **settings)
    expected = [o.outputs[0].token_ids for o in torch_llm.generate(prompts, params, use_tqdm=False)]
    assert first == again == expected


def test_mixture_of_experts_through_the_fused_moe_kernel_gives_the_torch_paths_tokens(checkpoint_factory):
    path = checkpoint_factory("qwen2_moe")  # routed experts, a shared expert and a dense layer
    prompts = [list(range(10, 31)), [7, 8, 9]]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    settings = dict(max_model_len=64, block_size=8, max_num_batched_tokens=16)  # the long prompt in chunks
    triton = LLM(str(path), attention_backend="triton", **settings)
    assert triton.runner.ops.fused_moe.__name__ == "fused_moe_triton"
    got = [o.outputs[0].token_ids for o in triton.generate(prompts, params, use_tqdm=False)]
    torch_llm = LLM(str(path), attention_backend="torch", **settings)
    assert got == [o.outputs[0].token_ids for o in torch_llm.generate(prompts, params, use_tqdm=False)]
