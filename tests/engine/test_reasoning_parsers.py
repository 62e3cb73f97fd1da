"""The think-tag parsers on token ids written by hand, and auto's choice of parser, with tokenizers that carry
the families' real special tokens and chat templates (tests/thinking_tokenizers.py)."""

from __future__ import annotations

import pytest

from bulkinfer.engine.reasoning.base import Phase
from bulkinfer.engine.reasoning.registry import auto_parser_name, reasoning_parser
from bulkinfer.engine.reasoning.think_tags import DeepSeekR1Parser, Qwen3Parser
from checkpoints import build_tokenizer
from thinking_tokenizers import thinking_tokenizer

USER = [{"role": "user", "content": "What is two and two?"}]


@pytest.fixture(scope="module")
def qwen3():
    return thinking_tokenizer("qwen3")


@pytest.fixture(scope="module")
def r1():
    return thinking_tokenizer("deepseek_r1")


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def prompt(tokenizer, **kwargs) -> list[int]:
    return ids(tokenizer, tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True, **kwargs))


def phases(parser, prompt_ids: list[int], output_ids: list[int]) -> list[Phase]:
    """The phase after each output token, as the engine tracks it."""
    phase, seen = parser.start(prompt_ids), []
    for end in range(1, len(output_ids) + 1):
        phase = parser.advance(phase, output_ids[:end])
        seen.append(phase)
    return seen


def test_r1_template_opens_the_reasoning_in_the_prompt(r1):
    parser = DeepSeekR1Parser(r1)
    reasoning, answer = ids(r1, "Two and two make four."), ids(r1, "\n\nFour")
    output = reasoning + ids(r1, "</think>") + answer
    assert parser.start(prompt(r1)) is Phase.REASONING
    assert phases(parser, prompt(r1), output) == [Phase.REASONING] * len(reasoning) + [Phase.ANSWER] * (1 + len(answer))
    split = parser.split(prompt(r1), output)
    assert (split.reasoning_ids, split.answer_ids, split.reasoning_closed) == (reasoning, answer, True)


def test_qwen3_model_writes_its_own_opening_tag(qwen3):
    parser = Qwen3Parser(qwen3)
    reasoning, answer = ids(qwen3, "\nLet me add.\n"), ids(qwen3, "\n\nFour")
    output = ids(qwen3, "<think>") + reasoning + ids(qwen3, "</think>") + answer
    assert parser.start(prompt(qwen3)) is Phase.PREAMBLE
    assert phases(parser, prompt(qwen3), output)[:2] == [Phase.REASONING, Phase.REASONING]
    split = parser.split(prompt(qwen3), output)
    assert (split.reasoning_ids, split.answer_ids, split.reasoning_closed) == (reasoning, answer, True)


def test_qwen3_with_thinking_off_answers_from_the_start(qwen3):
    parser = Qwen3Parser(qwen3)
    off = prompt(qwen3, enable_thinking=False)  # the template writes an empty <think></think> block
    answer = ids(qwen3, "Four")
    assert parser.start(off) is Phase.ANSWER
    assert phases(parser, off, answer) == [Phase.ANSWER] * len(answer)
    split = parser.split(off, answer)
    assert (split.reasoning_ids, split.answer_ids) == ([], answer)


def test_qwen3_answering_without_a_tag_is_all_answer(qwen3):
    parser = Qwen3Parser(qwen3)
    answer = ids(qwen3, "Four.")
    assert phases(parser, prompt(qwen3), answer) == [Phase.ANSWER] * len(answer)
    assert parser.split(prompt(qwen3), answer).answer_ids == answer


def test_r1_reasoning_without_an_end_tag_is_all_reasoning(r1):
    """Thinking cut by max_tokens: the reasoning is set, the answer empty, and the split says it is open."""
    parser = DeepSeekR1Parser(r1)
    output = ids(r1, "Two and two, then")
    assert phases(parser, prompt(r1), output) == [Phase.REASONING] * len(output)
    split = parser.split(prompt(r1), output)
    assert (split.reasoning_ids, split.answer_ids, split.reasoning_closed) == (output, [], False)


def test_r1_unopened_output_is_reasoning_and_a_written_opening_tag_is_left_out(r1):
    """No template opened the block (a plain prompt): R1 reasons first, and the tag it writes is a marker."""
    parser = DeepSeekR1Parser(r1)
    reasoning = ids(r1, "hmm")
    output = ids(r1, "<think>") + reasoning + ids(r1, "</think>") + ids(r1, "4")
    assert parser.start(ids(r1, "2 + 2 =")) is Phase.REASONING
    assert parser.split(ids(r1, "2 + 2 ="), output).reasoning_ids == reasoning


def test_a_stray_end_tag_after_the_answer_began_stays_in_the_answer(r1, qwen3):
    r1_parser = DeepSeekR1Parser(r1)
    answer = ids(r1, "Four") + ids(r1, "</think>") + ids(r1, " really")
    output = ids(r1, "ok") + ids(r1, "</think>") + answer
    assert phases(r1_parser, prompt(r1), output)[-len(answer):] == [Phase.ANSWER] * len(answer)
    assert r1_parser.split(prompt(r1), output).answer_ids == answer
    # Qwen3 answering at once with an end tag it never opened: all answer.
    q_parser = Qwen3Parser(qwen3)
    stray = ids(qwen3, "</think>") + ids(qwen3, "Four")
    assert phases(q_parser, prompt(qwen3), stray) == [Phase.ANSWER] * len(stray)
    split = q_parser.split(prompt(qwen3), stray)
    assert (split.reasoning_ids, split.answer_ids) == ([], stray)


def test_a_marker_split_across_tokens_is_found_at_its_last_piece():
    """A tokenizer without the tags as tokens spells each in several pieces."""
    tokenizer = build_tokenizer()
    parser = Qwen3Parser(tokenizer)
    opening, closing = ids(tokenizer, "<think>"), ids(tokenizer, "</think>")
    assert len(opening) > 1 and len(closing) > 1
    reasoning, answer = ids(tokenizer, "hmm"), ids(tokenizer, " four")
    output = opening + reasoning + closing + answer
    seen = phases(parser, ids(tokenizer, "Q:"), output)
    assert seen[:len(opening)] == [Phase.PREAMBLE] * (len(opening) - 1) + [Phase.REASONING]
    closed_at = len(opening) + len(reasoning) + len(closing) - 1
    assert seen[closed_at - 1] is Phase.REASONING and seen[closed_at] is Phase.ANSWER
    split = parser.split(ids(tokenizer, "Q:"), output)
    assert (split.reasoning_ids, split.answer_ids) == (reasoning, answer)


def test_the_budget_closes_with_the_end_tag(qwen3, r1):
    assert Qwen3Parser(qwen3).end_of_reasoning_ids() == ids(qwen3, "</think>")
    assert DeepSeekR1Parser(r1).end_of_reasoning_ids() == ids(r1, "</think>")


def test_auto_picks_the_family_from_the_vocabulary_and_template(qwen3, r1):
    assert auto_parser_name(qwen3) == "qwen3"
    assert auto_parser_name(r1) == "deepseek_r1"
    assert auto_parser_name(build_tokenizer()) == "none"  # no <think> token
    assert isinstance(reasoning_parser("auto", r1), DeepSeekR1Parser)
    assert reasoning_parser("none", r1) is None
    assert isinstance(reasoning_parser("qwen3", r1), Qwen3Parser)  # a named parser is taken as asked


def test_auto_needs_a_template_that_knows_the_tags():
    """The tags in the vocabulary are not enough: a template that never writes them is no thinking family."""
    plain = thinking_tokenizer("qwen3")
    plain.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert auto_parser_name(plain) == "none"


def test_an_earlier_turns_reasoning_in_the_prompt_does_not_end_this_ones(qwen3):
    """Qwen3's template keeps the reasoning of the turns since the last user message (tool calls): its
    </think> is followed by the rest of the conversation, and the new turn's opening is still the model's."""
    call = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
    conversation = [*USER, {"role": "assistant", "content": "", "reasoning_content": "I should add.",
                            "tool_calls": [call]},
                    {"role": "tool", "content": "4"}]
    text = qwen3.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert "</think>" in text
    assert Qwen3Parser(qwen3).start(ids(qwen3, text)) is Phase.PREAMBLE
