"""A thinking model in the engine: its reasoning apart from its answer, the thinking budget, and a constraint
that shapes the answer only. Random models never close their thinking by themselves: the budget does."""

from __future__ import annotations

import json

import jsonschema
import pytest

from bulkinfer import LLM, SamplingParams

USER = [{"role": "user", "content": "Is it a bug?"}]
TICKET = {"type": "object", "properties": {"label": {"enum": ["bug", "feature", "question"]},
                                           "urgent": {"type": "boolean"}},
          "required": ["label", "urgent"], "additionalProperties": False}


@pytest.fixture(scope="module")
def r1_dir(checkpoint_factory):
    return checkpoint_factory("llama", tokenizer="deepseek_r1")


@pytest.fixture(scope="module")
def r1(r1_dir) -> LLM:
    return LLM(str(r1_dir), max_model_len=256, num_kv_blocks=64)


@pytest.fixture(scope="module")
def qwen3(checkpoint_factory) -> LLM:
    return LLM(str(checkpoint_factory("qwen3", tokenizer="qwen3")), max_model_len=256, num_kv_blocks=64)


def end_id(llm: LLM) -> int:
    return llm.tokenizer.convert_tokens_to_ids("</think>")


def chat(llm: LLM, **params) -> object:
    return llm.chat(USER, SamplingParams(temperature=0, **params), use_tqdm=False)[0]


def decode(llm: LLM, token_ids: list[int]) -> str:
    return llm.tokenizer.decode(token_ids, skip_special_tokens=True)


def test_reasoning_cut_by_max_tokens_leaves_the_answer_empty(r1):
    out = chat(r1, max_tokens=6).outputs[0]
    assert end_id(r1) not in out.token_ids
    assert (out.text, out.finish_reason, out.num_reasoning_tokens) == ("", "length", 6)
    assert out.reasoning == decode(r1, out.token_ids)


def test_the_budget_closes_the_reasoning_and_the_answer_follows(r1):
    out = chat(r1, max_tokens=12, thinking_budget=4).outputs[0]
    assert out.token_ids[4] == end_id(r1)
    assert out.num_reasoning_tokens == 4 and len(out.token_ids) == 12 and out.finish_reason == "length"
    assert out.reasoning == decode(r1, out.token_ids[:4])
    assert out.text == decode(r1, out.token_ids[5:])


def test_a_budget_of_zero_answers_at_once(r1):
    out = chat(r1, max_tokens=5, thinking_budget=0).outputs[0]
    assert out.token_ids[0] == end_id(r1)
    assert (out.reasoning, out.num_reasoning_tokens) == ("", 0)


def test_without_a_parser_the_output_is_as_before(r1_dir, r1):
    plain = LLM(str(r1_dir), max_model_len=256, num_kv_blocks=64, reasoning_parser="none")
    out, parsed = chat(plain, max_tokens=12).outputs[0], chat(r1, max_tokens=12).outputs[0]
    assert out.token_ids == parsed.token_ids
    assert (out.reasoning, out.num_reasoning_tokens) == (None, 0)
    assert out.text == decode(plain, out.token_ids)
    refused = chat(plain, max_tokens=12, thinking_budget=4)
    assert "thinking_budget needs a reasoning parser" in refused.error and "\n" not in refused.error


@pytest.mark.parametrize("family", ["r1", "qwen3"])
def test_a_schema_shapes_the_answer_after_the_budget_closed_the_reasoning(family, request):
    """Qwen3's template leaves the opening to the model: a constrained row gets ``<think>`` opened for it."""
    llm = request.getfixturevalue(family)
    masked_before = llm.stats.grammar_mask_rows
    out = chat(llm, max_tokens=80, thinking_budget=8, json=TICKET, seed=0)
    completion = out.outputs[0]
    assert out.error is None and completion.finish_reason == "stop"
    jsonschema.validate(json.loads(completion.text), TICKET)
    assert completion.num_reasoning_tokens == 8 and completion.reasoning
    # The reasoning drew from the whole vocabulary: only the answer's tokens were masked.
    answer_tokens = len(completion.token_ids) - completion.token_ids.index(end_id(llm)) - 1
    assert llm.stats.grammar_mask_rows - masked_before <= answer_tokens


def test_stop_strings_apply_to_the_answer_only(r1):
    free = chat(r1, max_tokens=20, thinking_budget=6).outputs[0]
    in_reasoning = next(free.reasoning[at:at + 2] for at in range(len(free.reasoning))
                        if free.reasoning[at:at + 2].strip() and free.reasoning[at:at + 2] not in free.text)
    passed = chat(r1, max_tokens=20, thinking_budget=6, stop=[in_reasoning]).outputs[0]
    assert (passed.reasoning, passed.text, passed.finish_reason) == (free.reasoning, free.text, "length")
    in_answer = free.text[3:5]
    cut = chat(r1, max_tokens=20, thinking_budget=6, stop=[in_answer]).outputs[0]
    assert (cut.reasoning, cut.text, cut.stop_reason) == (free.reasoning, free.text[:free.text.index(in_answer)],
                                                         in_answer)


def test_qwen3_with_thinking_off_has_no_reasoning(qwen3):
    out = qwen3.chat(USER, SamplingParams(temperature=0, max_tokens=8, thinking_budget=2), use_tqdm=False,
                     chat_template_kwargs={"enable_thinking": False})[0].outputs[0]
    assert (out.reasoning, out.num_reasoning_tokens) == ("", 0)
    assert out.text == decode(qwen3, out.token_ids)


def test_stats_count_reasoning_and_answer_tokens_apart(r1_dir):
    llm = LLM(str(r1_dir), max_model_len=256, num_kv_blocks=64)
    chat(llm, max_tokens=10, thinking_budget=3)
    assert (llm.stats.reasoning_tokens, llm.stats.answer_tokens) == (3, 7)


def test_a_forced_token_has_logprob_zero(r1, qwen3):
    out = chat(r1, max_tokens=8, thinking_budget=3, logprobs=2).outputs[0]
    forced = out.logprobs[3]
    assert list(forced) == [end_id(r1)] and forced[end_id(r1)].logprob == 0.0
    assert all(len(position) >= 2 for at, position in enumerate(out.logprobs) if at != 3)
    # Forced before the first token too: a constrained Qwen3 row's opening, then a budget of 0's close.
    out = chat(qwen3, max_tokens=8, thinking_budget=0, logprobs=1, regex="[ab]+").outputs[0]
    assert len(out.logprobs) == len(out.token_ids)
    assert [list(position) for position in out.logprobs[:2]] == [[out.token_ids[0]], [end_id(qwen3)]]


def test_generate_without_a_template_gives_reasoning(r1, qwen3):
    """R1 reasons first even when no template opened the block; Qwen3's output without a tag is an answer."""
    out = r1.generate("2 + 2 =", SamplingParams(temperature=0, max_tokens=6, thinking_budget=2), use_tqdm=False)
    completion = out[0].outputs[0]
    assert completion.num_reasoning_tokens == 2 and completion.token_ids[2] == end_id(r1)
    out = qwen3.generate("2 + 2 =", SamplingParams(temperature=0, max_tokens=6), use_tqdm=False)[0].outputs[0]
    assert (out.reasoning, out.text) == ("", decode(qwen3, out.token_ids))


def test_a_budget_forces_a_marker_of_several_tokens_in_one_step(tiny_llama):
    """The shared test tokenizer spells </think> in pieces: they are appended at once, and the next step
    computes them as one chunk instead of one forward pass each."""
    llm = LLM(str(tiny_llama), max_model_len=256, num_kv_blocks=64, reasoning_parser="deepseek_r1")
    end = llm.tokenizer.encode("</think>", add_special_tokens=False)
    assert len(end) > 1
    out = llm.generate("2 + 2 =", SamplingParams(temperature=0, max_tokens=12, thinking_budget=3),
                       use_tqdm=False)[0].outputs[0]
    assert out.token_ids[3:3 + len(end)] == end and out.num_reasoning_tokens == 3
    assert llm.stats.steps == 12 - len(end)  # one sampled token per step
