"""deterministic=True: a request's tokens and logprobs are bitwise the same alone, in a mixed
batch, with its prompt chunked, and after a preemption, in float32 and in bfloat16."""

from __future__ import annotations

import pytest
import torch
from kernel_testing import make_batch

from bulkinfer import LLM, SamplingParams
from bulkinfer.kernels.paged_attention import paged_attention_ref
from bulkinfer.kernels.paged_attention_invariant import paged_attention_invariant


def prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(3)
    lengths = [3, 41, 17, 90, 8, 56, 33, 70]
    return [torch.randint(5, 600, (n,), generator=generator).tolist() for n in lengths]


def params(index: int) -> SamplingParams:
    # Greedy and seeded sampling, each with logprobs: both must not depend on the batch.
    if index % 2:
        return SamplingParams(temperature=0.9, top_p=0.95, seed=100 + index, max_tokens=20, ignore_eos=True,
                              logprobs=3, prompt_logprobs=1)
    return SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, logprobs=2)


def results(outputs) -> list[tuple]:
    # Floats compared with ==: bitwise identity is the claim.
    return [(o.outputs[0].token_ids, o.outputs[0].cumulative_logprob,
             [[(t, r.logprob, r.rank) for t, r in record.items()] for record in o.outputs[0].logprobs],
             [None if record is None else [(t, r.logprob) for t, r in record.items()]
              for record in o.prompt_logprobs or []])
            for o in outputs]


ENGINE = {"max_model_len": 256, "block_size": 8, "deterministic": True}  # what every run below shares


def run(path, batch: list[int], **options) -> list[tuple]:
    llm = LLM(str(path), **ENGINE, **options)
    return results(llm.generate([prompts()[i] for i in batch], [params(i) for i in batch], use_tqdm=False))


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def dtype(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def alone(tiny_llama, dtype) -> list[tuple]:
    llm = LLM(str(tiny_llama), **ENGINE, dtype=dtype, enable_prefix_caching=False)
    return [results(llm.generate([prompt], [params(i)], use_tqdm=False))[0] for i, prompt in enumerate(prompts())]


def test_mixed_batches_match_alone(tiny_llama, alone, dtype):
    everything = list(range(len(prompts())))
    assert run(tiny_llama, everything, dtype=dtype) == alone
    odd_company = [5, 0, 7, 2]  # another order, another batch composition
    assert run(tiny_llama, odd_company, dtype=dtype) == [alone[i] for i in odd_company]


def test_chunked_prompts_match_alone(tiny_llama, alone, dtype):
    everything = list(range(len(prompts())))
    assert run(tiny_llama, everything, dtype=dtype, max_num_batched_tokens=24) == alone


def test_preempted_requests_match_alone(tiny_llama, alone, dtype):
    everything = list(range(len(prompts())))
    assert run(tiny_llama, everything, dtype=dtype, num_kv_blocks=16, enable_prefix_caching=False) == alone


def test_preemption_happens_in_that_setup(tiny_llama):
    llm = LLM(str(tiny_llama), **ENGINE, dtype="float32", num_kv_blocks=16, enable_prefix_caching=False)
    llm.generate(prompts(), [params(i) for i in range(len(prompts()))], use_tqdm=False)
    assert llm.stats.preemptions > 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mixture_of_experts_in_a_chunked_mixed_batch_matches_alone(checkpoint_factory, dtype):
    path = checkpoint_factory("qwen2_moe")  # routed experts, a shared expert and a dense layer
    batch = [3, 0, 2, 1]
    llm = LLM(str(path), **ENGINE, dtype=dtype, enable_prefix_caching=False)
    alone = [results(llm.generate([prompts()[i]], [params(i)], use_tqdm=False))[0] for i in batch]
    assert run(path, batch, dtype=dtype, max_num_batched_tokens=24) == alone


def test_lfm2_in_a_chunked_mixed_batch_matches_alone(checkpoint_factory):
    """Short convolutions, their state carried across chunks in the state pool, keep a request's bits."""
    path = checkpoint_factory("lfm2")
    batch = [3, 0, 2, 1]
    llm = LLM(str(path), **ENGINE, enable_prefix_caching=False)
    alone = [results(llm.generate([prompts()[i]], [params(i)], use_tqdm=False))[0] for i in batch]
    assert run(path, batch, max_num_batched_tokens=24) == alone


@pytest.mark.parametrize("arch,kind", [("granite_h", "Mamba2"), ("qwen3_5", "gated delta-net"),
                                       ("qwen3_next", "gated delta-net")])
def test_scanned_recurrent_layers_refuse_deterministic_mode_in_one_line(checkpoint_factory, arch, kind):
    """Their CPU scans are not batch-invariant: alone and in a mixed batch, Granite 4.0-H (fp32 and bf16, chunked),
    Qwen3.5 (fp32, even unchunked) and Qwen3-Next (bf16, chunked) gave other bits, so the mode is refused rather
    than promised."""
    with pytest.raises(ValueError, match=f"does not run with {kind} layers"):
        LLM(str(checkpoint_factory(arch)), **ENGINE)


def test_gpt_oss_in_a_chunked_mixed_batch_matches_alone(tiny_gpt_oss):
    """Sinks, per-layer windows and biased experts (in float32, the checkpoint's) keep a request's bits."""
    batch = [3, 0, 2, 1]
    llm = LLM(str(tiny_gpt_oss), **ENGINE, dtype="float32", enable_prefix_caching=False)
    alone = [results(llm.generate([prompts()[i]], [params(i)], use_tqdm=False))[0] for i in batch]
    assert run(tiny_gpt_oss, batch, dtype="float32", max_num_batched_tokens=24) == alone


VARIANTS = [{}, {"sliding_window": 5}, {"sliding_window": 40}, {"softcap": 3.0}, {"sliding_window": 7, "softcap": 2.0}]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}{v[k]}" for k in v) or "plain")
def test_invariant_attention_matches_the_reference(variant):
    rows = [(1, 17), (9, 9), (1, 1), (4, 33), (1, 64), (20, 45)]
    batch = make_batch(rows, 8, 2, 64, torch.float32, block_size=16, seed=2)
    torch.testing.assert_close(paged_attention_invariant(**batch, **variant), paged_attention_ref(**batch, **variant),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head_dim,variant", [(16, {}), (64, {}), (64, {"sliding_window": 9, "softcap": 2.0})])
def test_invariant_attention_per_sequence_is_independent_of_the_batch(head_dim, variant):
    # Decode rows, a long prefill and short ones: more tiles than one batched matmul takes.
    rows = [(1, n) for n in (23, 61, 40, 110, 14, 75, 52, 98)] + [(20, 45), (3, 3), (140, 140)]
    batch = make_batch(rows, 4, 2, head_dim, torch.float32, block_size=8, seed=2)
    together = paged_attention_invariant(**batch, **variant)
    starts = batch["query_start_loc"].tolist()
    for i, (q_len, _) in enumerate(rows):
        alone = dict(batch, query=batch["query"][starts[i]:starts[i + 1]],
                     query_start_loc=torch.tensor([0, q_len], dtype=torch.int32),
                     seq_lens=batch["seq_lens"][i:i + 1], block_tables=batch["block_tables"][i:i + 1])
        assert torch.equal(paged_attention_invariant(**alone, **variant), together[starts[i]:starts[i + 1]])
