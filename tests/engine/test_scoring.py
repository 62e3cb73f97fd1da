"""Log-likelihood scoring against transformers' forward pass."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from bulkinfer import LLM
from bulkinfer.engine.scoring import encode_pair, rolling_windows


@pytest.fixture(scope="module")
def models(tiny_llama):
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    return hf, LLM(str(tiny_llama), dtype="float32", max_model_len=64, block_size=8)


def hf_scores(hf, context: list[int], continuation: list[int]) -> tuple[list[float], bool]:
    tokens = context + continuation
    with torch.no_grad():
        logprobs = hf(torch.tensor([tokens[:-1]])).logits[0].log_softmax(-1)[len(context) - 1:]
    target = torch.tensor(continuation)
    return logprobs.gather(1, target[:, None])[:, 0].tolist(), bool((logprobs.argmax(-1) == target).all())


def test_token_scores_match_transformers_and_share_the_prefix(models):
    hf, llm = models
    few_shot = list(range(20, 60))  # 40 shared tokens: five full blocks
    pairs = [(few_shot + [70 + i], [80 + i, 90 + i, 100]) for i in range(6)] + [([5], [6, 7])]
    hits_before = llm.stats.prefix_cache_hit_tokens
    results = llm.loglikelihood_tokens(pairs)
    assert llm.stats.prefix_cache_hit_tokens - hits_before >= 5 * 32  # later pairs reuse the prefix
    for (context, continuation), result in zip(pairs, results):
        expected, greedy = hf_scores(hf, context, continuation)
        assert result.token_logprobs == pytest.approx(expected, abs=1e-4)
        assert result.logprob == pytest.approx(sum(expected), abs=1e-4)
        assert result.is_greedy == greedy


def test_greedy_continuation_is_recognised(models):
    hf, llm = models
    context = [3, 14, 15, 92, 65]
    with torch.no_grad():
        greedy = hf.generate(torch.tensor([context]), max_new_tokens=4, do_sample=False)[0, 5:].tolist()
    [result] = llm.loglikelihood_tokens([(context, greedy)])
    assert result.is_greedy


def test_text_pairs_split_like_the_harness(models):
    _, llm = models
    context, continuation = encode_pair(llm.tokenizer, "The answer is ", "forty two")
    whole = llm.tokenizer.encode("The answer is forty two")
    assert context + continuation == whole and whole[0] == llm.tokenizer.bos_token_id
    assert llm.tokenizer.decode(continuation).startswith(" ")  # the space moved to the continuation
    [by_text] = llm.loglikelihood([("The answer is ", "forty two")])
    [by_ids] = llm.loglikelihood_tokens([(context, continuation)])
    assert by_text == by_ids


def test_rolling_windows_score_every_token_once():
    tokens = list(range(100, 125))
    windows = rolling_windows(tokens, prefix=1, max_len=10)
    assert [t for _, continuation in windows for t in continuation] == tokens
    for context, continuation in windows:
        assert len(context) + len(continuation) - 1 <= 10 and context


def test_rolling_loglikelihood_matches_transformers(models):
    hf, llm = models
    text = "A document long enough to need several windows of sixty four tokens, " * 3
    tokens = llm.tokenizer.encode(text)
    assert len(tokens) > 64
    [total] = llm.loglikelihood_rolling([text])
    expected = sum(sum(hf_scores(hf, c, x)[0]) for c, x in rolling_windows(tokens, llm.tokenizer.bos_token_id, 64))
    assert total == pytest.approx(expected, abs=1e-3)
