"""Sampling settings, stop conditions, logprobs and n > 1."""

from __future__ import annotations

import math

import pytest
import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.sampler import Sampler, _filtered_probs
from bulkinfer.engine.sequence import Sequence
from probes import last_logits


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    return LLM(str(tiny_llama), dtype="float32", max_model_len=256)


def sample_tokens(llm, prompts, params):
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


def test_seeded_sampling_does_not_depend_on_the_batch(llm):
    seeded = SamplingParams(temperature=1.0, seed=1234, max_tokens=20, ignore_eos=True)
    alone = sample_tokens(llm, ["Once upon a time"], seeded)[0]
    others = SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True)
    crowd = llm.generate(["a", "Once upon a time", "bb ccc", "x y z"], [others, seeded, others, others],
                         use_tqdm=False)
    assert crowd[1].outputs[0].token_ids == alone
    assert sample_tokens(llm, ["Once upon a time"], SamplingParams(temperature=1.0, seed=99, max_tokens=20,
                                                                    ignore_eos=True))[0] != alone


def filtered(probs_logits: torch.Tensor, **params) -> torch.Tensor:
    seq = Sequence(0, 0, [1], SamplingParams(**params), None)
    return _filtered_probs(probs_logits[None, :], [seq])[0]


def test_filters_keep_exactly_their_support():
    logits = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))
    assert torch.count_nonzero(filtered(logits, top_k=3)) == 3
    # top_p 0.7: 0.4 + 0.25 = 0.65 < 0.7, so the third token is needed and the fourth is not.
    assert filtered(logits, top_p=0.7).nonzero().flatten().tolist() == [0, 1, 2]
    # min_p 0.3: tokens below 0.3 * 0.4 = 0.12 go.
    assert filtered(logits, min_p=0.3).nonzero().flatten().tolist() == [0, 1, 2]
    assert filtered(logits, top_k=1, top_p=0.01).nonzero().flatten().tolist() == [0]


@pytest.mark.parametrize("temperature", [1e-300, 1e-40, 1e-6])
def test_a_temperature_too_small_to_divide_by_is_greedy(llm, temperature):
    ask = dict(max_tokens=8, ignore_eos=True)
    greedy = sample_tokens(llm, ["Once upon a time"], SamplingParams(temperature=0, **ask))
    assert sample_tokens(llm, ["Once upon a time"], SamplingParams(temperature=temperature, seed=3, **ask)) == greedy


@pytest.mark.parametrize("top_k", [6, 7, 2**63, 2**80])
def test_top_k_past_the_vocabulary_keeps_all_of_it(top_k):
    logits = torch.log(torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]))
    torch.testing.assert_close(filtered(logits, top_k=top_k), logits.softmax(-1))


@pytest.mark.parametrize("params, support", [
    (dict(top_k=2), 2), (dict(top_p=0.3), None), (dict(min_p=0.5), None)])
def test_sampled_tokens_stay_in_the_support(llm, params, support):
    prompt = llm.tokenizer.encode("The")
    torch.manual_seed(0)
    with torch.no_grad():
        probs = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=1, logprobs=50),
                             use_tqdm=False)[0].outputs[0].logprobs[0]
    ranked = sorted(probs.items(), key=lambda item: item[1].rank)
    values = [math.exp(lp.logprob) for _, lp in ranked]
    if support is None and "top_p" in params:
        support = next(i + 1 for i in range(len(values)) if sum(values[:i + 1]) >= params["top_p"])
    if support is None:
        support = sum(v >= params["min_p"] * values[0] for v in values)
    allowed = {token for token, _ in ranked[:support]}
    sampled = {o.outputs[0].token_ids[0] for o in llm.generate(
        [prompt] * 200, [SamplingParams(temperature=1.0, max_tokens=1, seed=s, **params) for s in range(200)],
        use_tqdm=False)}
    assert sampled <= allowed
    assert len(sampled) == min(support, len(allowed))  # 200 draws reach every allowed token here


@pytest.mark.parametrize("seeded", [False, True])
def test_draws_follow_the_distribution(seeded):
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05])
    rows = 4000
    seqs = []
    for index in range(rows):
        generator = torch.Generator().manual_seed(index) if seeded else None
        seqs.append(Sequence(index, 0, [1], SamplingParams(temperature=1.0), generator))
    tokens = Sampler(seed=0, device=torch.device("cpu"), eos_token_ids=set())(probs.log().expand(rows, -1), seqs).token_ids
    shares = torch.bincount(torch.tensor(tokens), minlength=5) / rows
    assert shares[1] == 0
    torch.testing.assert_close(shares, probs, atol=0.025, rtol=0)  # about 4 standard deviations


def test_stop_strings_cut_the_text(llm):
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    [free] = llm.generate(["Tell me"], params, use_tqdm=False)
    text = free.outputs[0].text
    stop = text[5:8]
    [cut] = llm.generate(["Tell me"], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True,
                                                     stop=[stop]), use_tqdm=False)
    assert cut.outputs[0].text == text[:text.index(stop)]
    assert cut.outputs[0].finish_reason == "stop" and cut.outputs[0].stop_reason == stop
    assert free.outputs[0].finish_reason == "length" and len(free.outputs[0].token_ids) == 40


def test_stop_token_ids_and_every_eos_id(checkpoint_factory):
    path = checkpoint_factory("llama3")  # generation_config.json lists two EOS ids
    llm = LLM(str(path), dtype="float32", max_model_len=256)
    assert {llm.tokenizer.convert_tokens_to_ids(t) for t in ("</s>", "<|eot|>")} <= llm.stop_checker.eos_token_ids
    [free] = llm.generate(["Hi"], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True), use_tqdm=False)
    tokens = free.outputs[0].token_ids
    [stopped] = llm.generate(["Hi"], SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[tokens[4]]),
                             use_tqdm=False)
    first = tokens.index(tokens[4])
    assert stopped.outputs[0].token_ids == tokens[:first + 1]
    assert stopped.outputs[0].finish_reason == "stop" and stopped.outputs[0].stop_reason == tokens[4]


@pytest.mark.parametrize("eos_token", ["</s>", "<|eot|>"])
def test_each_eos_id_ends_generation(checkpoint_factory, eos_token):
    path = checkpoint_factory("llama3")
    llm = LLM(str(path), dtype="float32", max_model_len=256)
    eos = llm.tokenizer.convert_tokens_to_ids(eos_token)
    # Make EOS the model's first choice after the prompt: give it the favourite's lm_head row,
    # scaled so that its logit comes out larger.
    prompt = llm.tokenizer.encode("Hi")
    logits = last_logits(llm, prompt)
    favourite, value = int(logits.argmax()), logits.max().item()
    lm_head = llm.runner.model.lm_head.weight.data
    lm_head[eos] = lm_head[favourite] * (2.0 if value > 0 else 0.5)
    [output] = llm.generate(["Hi"], SamplingParams(temperature=0, max_tokens=10), use_tqdm=False)
    assert output.outputs[0].token_ids == [eos]
    assert output.outputs[0].finish_reason == "stop" and output.outputs[0].text == ""
    [ignored] = llm.generate(["Hi"], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True), use_tqdm=False)
    assert len(ignored.outputs[0].token_ids) == 10 and ignored.outputs[0].finish_reason == "length"


def test_logprobs_and_prompt_logprobs(llm):
    [output] = llm.generate(["Logprobs please"], SamplingParams(temperature=0, max_tokens=5, logprobs=3,
                                                                 prompt_logprobs=2), use_tqdm=False)
    completion = output.outputs[0]
    assert len(completion.logprobs) == 5
    for token, record in zip(completion.token_ids, completion.logprobs):
        assert record[token].rank == 1 and len(record) == 3  # greedy: the chosen token is the top one
        assert sum(math.exp(lp.logprob) for lp in record.values()) <= 1 + 1e-5
    assert completion.cumulative_logprob == pytest.approx(sum(r[t].logprob for t, r in
                                                              zip(completion.token_ids, completion.logprobs)))
    prompt_records = output.prompt_logprobs
    assert prompt_records[0] is None and len(prompt_records) == len(output.prompt_token_ids)
    for token, record in zip(output.prompt_token_ids[1:], prompt_records[1:]):
        assert token in record and len(record) in (2, 3)


def test_prompt_logprobs_match_transformers(tiny_llama, llm):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    prompt = llm.tokenizer.encode("A longer prompt, so that it spans several blocks of the cache, yes")
    [output] = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)
    with torch.no_grad():
        expected = hf(torch.tensor([prompt])).logits[0].log_softmax(-1)
    for position, record in enumerate(output.prompt_logprobs[1:], 1):
        token = prompt[position]
        assert record[token].logprob == pytest.approx(expected[position - 1, token].item(), abs=1e-4)


def test_n_samples_share_the_prompt(llm):
    params = SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=12, ignore_eos=True)
    prompt = llm.tokenizer.encode("Shared prompt " * 6)
    [output] = llm.generate([prompt], params, use_tqdm=False)
    assert [c.index for c in output.outputs] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in output.outputs}) > 1
    assert llm.stats.prefix_cache_hit_tokens >= 3 * (len(prompt) - 1) // 16 * 16
    [again] = llm.generate([prompt], params, use_tqdm=False)
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in output.outputs]


def test_penalties_discourage_repeats(llm):
    prompt = llm.tokenizer.encode("ab")
    plain = sample_tokens(llm, [prompt], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0]
    penalised = sample_tokens(llm, [prompt], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True,
                                                             frequency_penalty=2.0, presence_penalty=2.0,
                                                             repetition_penalty=2.0))[0]
    assert len(set(penalised)) > len(set(plain))
