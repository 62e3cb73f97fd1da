"""A gpt-oss checkpoint on the engine: auto picks the harmony parsers, and a thinking budget closes the analysis
channel and opens the final one, whose text alone is the answer."""

from __future__ import annotations

import pytest

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.harmony import HarmonyTokens
from bulkinfer.engine.reasoning.harmony import END_OF_REASONING

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def llm(tiny_harmony) -> LLM:
    return LLM(str(tiny_harmony), dtype="float32", max_model_len=256, num_kv_blocks=64)


def test_auto_picks_the_harmony_parsers(llm):
    assert (llm.reasoning.parser.name, llm.tool_calls.parser.name) == ("gpt_oss", "gpt_oss")


def test_a_thinking_budget_closes_the_analysis_and_the_final_channel_is_the_answer(llm):
    tokenizer = llm.tokenizer
    prompt = tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True)
    # Markers are kept out, so what the model writes stays in the channel it was put in.
    no_markers = {token: -100.0 for token in HarmonyTokens.of(tokenizer).markers}
    params = SamplingParams(max_tokens=16, temperature=0, thinking_budget=4, logit_bias=no_markers)
    [output] = llm.generate([prompt + "<|channel|>analysis<|message|>"], params, use_tqdm=False)
    completion = output.outputs[0]
    forced = tokenizer.encode(END_OF_REASONING, add_special_tokens=False)
    written, answer = completion.token_ids[:4], completion.token_ids[4 + len(forced):]
    assert completion.token_ids[4:4 + len(forced)] == forced
    assert completion.num_reasoning_tokens == 4
    assert completion.reasoning == tokenizer.decode(written, skip_special_tokens=True)
    assert completion.text == tokenizer.decode(answer, skip_special_tokens=True)
    assert answer and completion.finish_reason == "length"
