"""The transformers path against transformers itself, on the zoo's tiny checkpoints, in fp32 on the CPU.

The reference is transformers with eager attention: last-position logits and every prompt logprob within 1e-4, and
greedy tokens equal to its own `generate`. Prompts are 30+ tokens, so they cross the zoo's 8-token sliding windows.
The same must hold with chunked prefill, the prefix cache and preemption forced on.
"""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.models.config import UnsupportedModelError
from probes import last_logits
from test_invariance import random_prompts
from test_parity import PROMPT_LENGTHS, assert_greedy_matches, check_against_transformers, hf_model
from zoo import REFUSED, ZOO

PATH = dict(model_impl="transformers", dtype="float32", device="cpu")
# Every zoo architecture that can run, and a mixture of experts through the same path.
ARCHS = [arch for arch in ZOO if arch not in REFUSED] + ["mixtral"]
# Checked in the quick suite with chunks, cache and preemption (multi-head latent attention among them: its values
# are narrower than its keys); the slow suite checks every architecture.
QUICK_STRESS = ["gemma3_text", "deepseek_v2", "deepseek_v3"]
MAX_TOKENS = 12


def hf_generate(hf, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """transformers' own greedy generate, one prompt at a time, stopping where its generation config says."""
    generated = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens, do_sample=False)
        generated.append(out[0, len(prompt):].tolist())
    return generated


def assert_prompt_logprobs_close(hf, outputs) -> None:
    for output in outputs:
        prompt = output.prompt_token_ids
        with torch.no_grad():
            expected = hf(torch.tensor([prompt])).logits[0, :-1].log_softmax(-1)
        expected = expected.gather(1, torch.tensor(prompt[1:])[:, None])[:, 0]
        ours = torch.tensor([record[token].logprob for token, record in zip(prompt[1:], output.prompt_logprobs[1:])])
        torch.testing.assert_close(ours, expected, atol=1e-4, rtol=0)


def check_generate_and_logprobs(llm: LLM, hf, prompts: list[list[int]]) -> None:
    """Greedy tokens equal transformers' generate; prompt logprobs within 1e-4 of its forward."""
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, prompt_logprobs=0)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == hf_generate(hf, prompts, MAX_TOKENS)
    assert_prompt_logprobs_close(hf, outputs)


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_logprobs_and_greedy_match_transformers(checkpoint_factory, arch):
    path = checkpoint_factory(arch)
    hf, llm = hf_model(path), LLM(str(path), block_size=8, max_model_len=256, **PATH)
    prompts = random_prompts(2, 30, 60, seed=7)
    with torch.no_grad():
        expected = hf(torch.tensor([prompts[0]])).logits[0, -1]
    torch.testing.assert_close(last_logits(llm, prompts[0]), expected, atol=1e-4, rtol=0)
    check_generate_and_logprobs(llm, hf, prompts)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_every_prompt_length_matches_transformers(checkpoint_factory, arch):
    """Prompts of 1 to 100 tokens: within a block, across blocks, inside and past the window."""
    check_against_transformers(checkpoint_factory(arch), block_size=8, num_prompts=len(PROMPT_LENGTHS),
                               max_tokens=16, **PATH)


def check_with_chunks_prefix_cache_and_preemption(path, **options) -> None:
    """Shared 20-token prefixes (cache hits across windows), 7-token steps (chunked prefill) and 20 blocks of 4 tokens
    for eight requests of up to 68 tokens (preemption); ``options`` (default: this path's) go to LLM."""
    hf = hf_model(path)
    llm = LLM(str(path), block_size=4, max_model_len=256, max_num_batched_tokens=7, num_kv_blocks=20,
              enable_prefix_caching=True, **(options or PATH))
    shared = random_prompts(1, 20, 21, seed=2)[0]
    prompts = [shared + tail for tail in random_prompts(8, 10, 40, seed=3)]
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    assert llm.stats.preemptions > 0 and llm.stats.prefix_cache_hit_tokens > 0
    assert_greedy_matches(hf, prompts, outputs)
    check_generate_and_logprobs(llm, hf, prompts[:3])  # prompt logprobs computed in 7-token chunks


@pytest.mark.parametrize("arch", QUICK_STRESS)
def test_chunks_prefix_cache_and_preemption_keep_parity(checkpoint_factory, arch):
    check_with_chunks_prefix_cache_and_preemption(checkpoint_factory(arch))


@pytest.mark.slow
@pytest.mark.parametrize("arch", [arch for arch in ARCHS if arch not in QUICK_STRESS])
def test_chunks_prefix_cache_and_preemption_keep_parity_everywhere(checkpoint_factory, arch):
    check_with_chunks_prefix_cache_and_preemption(checkpoint_factory(arch))


@pytest.mark.parametrize("arch", list(REFUSED))
def test_recurrent_layers_are_refused_in_one_line(checkpoint_factory, arch):
    """The transformers path has no recurrent state pool (bulkinfer's own code runs these, test_parity_hybrid.py)."""
    with pytest.raises(UnsupportedModelError) as info:
        LLM(str(checkpoint_factory(arch)), model_impl="transformers")
    message = str(info.value)
    assert "\n" not in message and REFUSED[arch] in message and "Qwen3_5ForCausalLM" in message
