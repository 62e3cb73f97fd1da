"""Applying token masks: every forbidden logit becomes -inf, every allowed one and every unconstrained
row is left as it was, in line on the CPU and from the mask thread used beside a GPU."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
import torch

from bulkinfer import LLM
from bulkinfer.engine import grammar_masks
from bulkinfer.engine.grammar_masks import GrammarMasks, PendingMasks
from bulkinfer.sampling_params import SamplingParams


def allowed_by_bits(words: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[rows, vocab_size] bool, read one bit at a time: token t is bit t % 32 of word t // 32."""
    return torch.tensor([[bool((int(row[t // 32]) >> (t % 32)) & 1) for t in range(vocab_size)] for row in words])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("vocab_size", [1000, 1024])
@pytest.mark.parametrize("constrained_rows", [[0, 1, 2, 3, 4], [1, 3, 4]])
@pytest.mark.parametrize("rows_per_slice", [1, 2, 8])
def test_forbidden_logits_become_minus_infinity_and_nothing_else_changes(dtype, vocab_size, constrained_rows,
                                                                         rows_per_slice, monkeypatch):
    monkeypatch.setattr(grammar_masks, "CPU_BIAS_SLICE_BYTES", rows_per_slice * vocab_size * dtype.itemsize)
    masks = GrammarMasks(vocab_size, max_rows=8, device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(vocab_size + len(constrained_rows))
    words = torch.randint(-2**31, 2**31 - 1, (len(constrained_rows), masks.bitmask.shape[1]), dtype=torch.int32,
                          generator=generator)
    masks.bitmask[:len(constrained_rows)] = words
    logits = torch.randn(5, vocab_size, generator=generator).to(dtype)
    before = logits.clone()
    done = Future()
    done.set_result(0.0)
    masks.apply(PendingMasks(constrained_rows, done), logits)
    expected = before.clone()
    expected[constrained_rows] = before[constrained_rows].masked_fill(~allowed_by_bits(words, vocab_size), float("-inf"))
    assert torch.equal(logits, expected)
    assert masks.steps_masked == 1 and masks.rows_masked == len(constrained_rows)


@pytest.mark.parametrize("device", ["cpu", "cuda"])  # "cuda" takes the mask thread's path; the logits stay here
def test_masks_of_real_matchers_are_the_matchers_own_masks(tiny_llama, device):
    llm = LLM(str(tiny_llama), max_model_len=64)
    template = llm.grammars.get(SamplingParams(choice=["yes", "no"]).constraint).result()
    masks = GrammarMasks(llm.model_config.vocab_size, max_rows=4, device=torch.device(device))
    try:
        matchers = [template.deep_copy(), None, template.deep_copy()]
        matchers[2].consume_token(llm.tokenizer.encode("y", add_special_tokens=False)[0])
        logits = torch.zeros(3, llm.model_config.vocab_size)
        masks.apply(masks.start([SimpleNamespace(matcher=m, grammar_active=m is not None) for m in matchers]), logits)
    finally:
        masks.close()
    for row in (0, 2):  # each row's mask, as the matcher itself gives it
        words = torch.frombuffer(bytearray(matchers[row].compute_bitmask()), dtype=torch.int32)
        allowed = allowed_by_bits(words[None], llm.model_config.vocab_size)[0]
        assert torch.equal(logits[row], torch.zeros_like(logits[row]).masked_fill(~allowed, float("-inf")))
        assert 0 < allowed.sum() < 4  # the choices' first letters; then "es", or "e" and "es"
    assert torch.equal(logits[1], torch.zeros(llm.model_config.vocab_size))  # unconstrained
