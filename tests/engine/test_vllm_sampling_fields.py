"""The sampling fields vLLM users pass: min_tokens, logit_bias, bad_words, include_stop_str_in_output,
truncate_prompt_tokens and best_of, each checked for its effect on the tiny checkpoint, greedy, and
against transformers' logits processors where it has one."""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM, SamplingParams

GREEDY = dict(temperature=0.0, ignore_eos=True)
PROMPT = "Once upon a time there was"


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    return LLM(str(tiny_llama), dtype="float32", max_model_len=128)


@pytest.fixture(scope="module")
def hf(tiny_llama):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()


def generate(llm: LLM, prompt: str | list[int], **params):
    [output] = llm.generate([prompt], SamplingParams(**params), use_tqdm=False)
    assert output.error is None, output.error
    return output


def hf_greedy(hf, prompt_ids: list[int], max_tokens: int, processor) -> list[int]:
    from transformers import LogitsProcessorList

    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt_ids]), max_new_tokens=max_tokens, do_sample=False,
                          logits_processor=LogitsProcessorList([processor]), eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def test_min_tokens_holds_back_stop_token_ids(llm, hf):
    """The greedy first token made a stop token: without min_tokens it ends the output at once."""
    first = generate(llm, PROMPT, max_tokens=1, **GREEDY).outputs[0].token_ids[0]
    assert generate(llm, PROMPT, max_tokens=8, stop_token_ids=[first], **GREEDY).outputs[0].token_ids == [first]
    held = generate(llm, PROMPT, max_tokens=8, min_tokens=5, stop_token_ids=[first], **GREEDY).outputs[0]
    assert len(held.token_ids) >= 5 and first not in held.token_ids[:5]
    from transformers import MinNewTokensLengthLogitsProcessor

    prompt_ids = llm.tokenizer.encode(PROMPT)
    reference = hf_greedy(hf, prompt_ids, 5, MinNewTokensLengthLogitsProcessor(len(prompt_ids), 5, first))
    assert held.token_ids[:5] == reference


def test_min_tokens_holds_back_end_of_sequence(llm):
    eos = llm.tokenizer.eos_token_id
    forced = dict(temperature=0.0, logit_bias={eos: 100.0}, max_tokens=6)
    assert generate(llm, PROMPT, **forced).outputs[0].token_ids == [eos]
    held = generate(llm, PROMPT, min_tokens=3, **forced).outputs[0]
    assert len(held.token_ids) == 4 and eos not in held.token_ids[:3] and held.finish_reason == "stop"


def test_min_tokens_holds_back_stop_strings(llm):
    text = generate(llm, PROMPT, max_tokens=10, **GREEDY).outputs[0].text
    stop = text.strip()[:1]  # met within the first token or two
    assert generate(llm, PROMPT, max_tokens=10, stop=[stop], **GREEDY).outputs[0].text.strip() == ""
    held = generate(llm, PROMPT, max_tokens=10, stop=[stop], min_tokens=10, **GREEDY).outputs[0]
    assert held.finish_reason == "length" and held.text == text


def test_logit_bias_forces_a_token_and_matches_transformers(llm, hf):
    from transformers import SequenceBiasLogitsProcessor

    token = llm.tokenizer.encode("zebra", add_special_tokens=False)[-1]
    output = generate(llm, PROMPT, max_tokens=4, logit_bias={token: 100.0}, **GREEDY).outputs[0]
    assert output.token_ids == [token] * 4
    nudged = generate(llm, PROMPT, max_tokens=6, logit_bias={token: 3.0}, **GREEDY).outputs[0].token_ids
    reference = hf_greedy(hf, llm.tokenizer.encode(PROMPT), 6, SequenceBiasLogitsProcessor({(token,): 3.0}))
    assert nudged == reference


def test_a_logit_bias_token_past_the_vocabulary_fails_its_request_only(llm):
    vocab = llm.model_config.vocab_size
    bad, good = llm.generate([PROMPT, PROMPT], [SamplingParams(max_tokens=2, logit_bias={vocab: 1.0}),
                                                SamplingParams(max_tokens=2)], use_tqdm=False)
    assert "logit_bias" in bad.error and str(vocab) in bad.error and good.error is None


def test_bad_words_never_appear_and_match_transformers(llm, hf):
    from transformers import NoBadWordsLogitsProcessor

    from bulkinfer.engine.logit_rules import bad_word_ids

    plain = generate(llm, PROMPT, max_tokens=12, **GREEDY).outputs[0]
    # Two tokens greedy decoding writes, whose text is spelled by the same two tokens
    pairs = [plain.token_ids[start:start + 2] for start in range(len(plain.token_ids) - 1)]
    words = [llm.tokenizer.decode(pair) for pair in pairs]
    word = next(word for word in words if any(_contains(plain.token_ids, ids) and len(ids) > 1
                                              for ids in bad_word_ids(llm.tokenizer, [word])))
    spellings = bad_word_ids(llm.tokenizer, [word])
    banned = generate(llm, PROMPT, max_tokens=12, bad_words=[word], **GREEDY).outputs[0]
    assert not any(_contains(banned.token_ids, spelling) for spelling in spellings)
    reference = hf_greedy(hf, llm.tokenizer.encode(PROMPT), 12, NoBadWordsLogitsProcessor(spellings))
    assert banned.token_ids == reference


def _contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[start:start + len(part)] == part for start in range(len(tokens)))


def test_include_stop_str_in_output_keeps_the_stop_string(llm):
    text = generate(llm, PROMPT, max_tokens=12, **GREEDY).outputs[0].text
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = generate(llm, PROMPT, max_tokens=12, stop=[stop], **GREEDY).outputs[0]
    kept = generate(llm, PROMPT, max_tokens=12, stop=[stop], include_stop_str_in_output=True, **GREEDY).outputs[0]
    assert cut.text == text[:text.index(stop)] and kept.text == cut.text + stop
    assert kept.stop_reason == stop


def test_truncate_prompt_tokens_runs_the_last_tokens_of_the_prompt(llm):
    prompt_ids = llm.tokenizer.encode(PROMPT + " " + "and then " * 60)
    assert len(prompt_ids) > llm.max_model_len  # too long to run whole
    truncated = generate(llm, prompt_ids, max_tokens=6, truncate_prompt_tokens=5, **GREEDY)
    assert truncated.prompt_token_ids == prompt_ids[-5:]
    alone = generate(llm, prompt_ids[-5:], max_tokens=6, **GREEDY)
    assert truncated.outputs[0].token_ids == alone.outputs[0].token_ids


def test_best_of_is_accepted_equal_to_n_and_refused_otherwise():
    assert SamplingParams(n=2, best_of=2).best_of == 2
    with pytest.raises(ValueError, match="best_of must equal n"):
        SamplingParams(n=2, best_of=4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_bias_past_float32_still_samples_the_biased_tokens(llm, temperature):
    """1e300 is a finite bias, but infinite in the float32 logits, where inf - inf would give NaN."""
    biased = {5: 1e300, 6: 1e300}
    output = generate(llm, PROMPT, max_tokens=4, temperature=temperature, seed=0, ignore_eos=True,
                      logit_bias=biased).outputs[0]
    assert set(output.token_ids) <= set(biased)
