"""The whole engine through the Triton kernels (interpreted on the CPU) against the PyTorch path."""

from __future__ import annotations

import pytest

from bulkinfer import LLM, SamplingParams

pytest.importorskip("triton")


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_e4m3"])
def test_triton_path_gives_the_torch_paths_greedy_tokens(checkpoint_factory, kv_cache_dtype):
    path = checkpoint_factory("qwen3")  # q/k norm and a head_dim unlike hidden/heads
    shared = list(range(10, 30))
    prompts = [shared + [40 + i] * (i + 1) for i in range(3)] + [[7, 8, 9]]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    # A 16-token budget splits the 21+ token prompts into chunks; the second pass hits the cache.
    settings = dict(dtype="float32", max_model_len=64, num_kv_blocks=24, block_size=8, max_num_batched_tokens=16,
                    kv_cache_dtype=kv_cache_dtype)
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
    settings = dict(dtype="float32", max_model_len=64, block_size=8,
                    max_num_batched_tokens=16)  # the long prompt in chunks
    triton = LLM(str(path), attention_backend="triton", **settings)
    assert triton.runner.ops.fused_moe.__name__ == "fused_moe_triton"
    got = [o.outputs[0].token_ids for o in triton.generate(prompts, params, use_tqdm=False)]
    torch_llm = LLM(str(path), attention_backend="torch", **settings)
    assert got == [o.outputs[0].token_ids for o in torch_llm.generate(prompts, params, use_tqdm=False)]


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_e4m3"])
def test_sliding_windows_and_soft_caps_through_the_transformers_path(checkpoint_factory, kv_cache_dtype):
    """Gemma 2 through transformers' code on the Triton kernels: 8-token windows on alternate layers and
    attention soft-capping, over 30-token prompts taken in chunks; tokens and logprobs as the torch path's."""
    check_triton_against_torch(checkpoint_factory("gemma2"), kv_cache_dtype)


def test_values_narrower_than_keys_through_the_transformers_path(checkpoint_factory):
    """DeepSeek-V2's latent attention (keys of 24, values of 12) on the Triton kernels, as on the torch path."""
    check_triton_against_torch(checkpoint_factory("deepseek_v2"), "auto")


def test_native_latent_attention_through_the_triton_kernels(checkpoint_factory):
    """DeepSeek-V3's latent rows stored by store_kv, decoded by the absorbed MLA kernel (split over the keys
    and merged), prefill expanded; in chunks, beside other sequences' decodes: as on the torch path."""
    check_triton_against_torch(checkpoint_factory("deepseek_v3", first_k_dense_replace=2), "auto", "native")


def check_triton_against_torch(path, kv_cache_dtype: str, model_impl: str = "transformers") -> None:
    prompts = [list(range(10, 40)), list(range(50, 61))]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=1)
    settings = dict(dtype="float32", model_impl=model_impl, max_model_len=64, block_size=8, max_num_batched_tokens=16,
                    kv_cache_dtype=kv_cache_dtype)
    got, expected = (LLM(str(path), attention_backend=backend, **settings).generate(prompts, params, use_tqdm=False)
                     for backend in ("triton", "torch"))
    for a, b in zip(got, expected):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert [lp[t].logprob for lp, t in zip(a.outputs[0].logprobs, a.outputs[0].token_ids)] == pytest.approx(
            [lp[t].logprob for lp, t in zip(b.outputs[0].logprobs, b.outputs[0].token_ids)], abs=1e-4)


def test_native_gpt_oss_through_the_triton_kernels(tiny_gpt_oss):
    """Sinks with 8-token windows on alternate layers and full attention on the others, in both Triton kernels
    (30-token prompts in chunks, then decode); gpt-oss's biased, clamped-SwiGLU experts in the fused MoE kernel."""
    prompts = [list(range(10, 40)), list(range(50, 61))]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=1)
    settings = dict(dtype="float32", model_impl="native", max_model_len=64, block_size=8, max_num_batched_tokens=16)
    got, expected = (LLM(str(tiny_gpt_oss), attention_backend=backend, **settings).generate(prompts, params,
                                                                                              use_tqdm=False)
                     for backend in ("triton", "torch"))
    for a, b in zip(got, expected):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert [lp[t].logprob for lp, t in zip(a.outputs[0].logprobs, a.outputs[0].token_ids)] == pytest.approx(
            [lp[t].logprob for lp, t in zip(b.outputs[0].logprobs, b.outputs[0].token_ids)], abs=1e-4)
