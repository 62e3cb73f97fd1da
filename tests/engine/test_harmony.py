"""gpt-oss's harmony format read from token ids: the reasoning parser's phases and split, and the tool-call parser,
on outputs written by hand with a tokenizer that carries gpt-oss's special tokens at their real ids."""

from __future__ import annotations

import functools
import json

import pytest
from checkpoints import build_tokenizer
from harmony_checkpoint import HARMONY_IDS, build_harmony_tokenizer

from bulkinfer.engine.chat_template import ChatTemplate
from bulkinfer.engine.harmony import HarmonyTokens
from bulkinfer.engine.reasoning.base import Phase
from bulkinfer.engine.reasoning.harmony import HarmonyReasoningParser
from bulkinfer.engine.tools.harmony import HarmonyToolCallParser

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@functools.cache
def tokenizer():
    return build_harmony_tokenizer()


def ids(text: str) -> list[int]:
    return tokenizer().encode(text, add_special_tokens=False)


def text(token_ids: list[int]) -> str:
    return tokenizer().decode(token_ids, skip_special_tokens=True)


def prompt_ids(messages=QUESTION, **template_kwargs) -> list[int]:
    """The prompt gpt-oss's own chat template writes: it ends with `<|start|>assistant`."""
    return ids(ChatTemplate(tokenizer()).render(messages, template_kwargs=template_kwargs))


def phases(parser: HarmonyReasoningParser, prompt: list[int], output: list[int]) -> list[Phase]:
    """The phase after each output token, as the engine tracks it."""
    phase, seen = parser.start(prompt), []
    for length in range(1, len(output) + 1):
        phase = parser.advance(phase, output[:length])
        seen.append(phase)
    return seen


@pytest.fixture(scope="module")
def parser() -> HarmonyReasoningParser:
    return HarmonyReasoningParser(tokenizer())


@pytest.fixture(scope="module")
def tools() -> HarmonyToolCallParser:
    return HarmonyToolCallParser(tokenizer())


def test_markers_have_gpt_oss_ids():
    tokens = HarmonyTokens.of(tokenizer())
    assert (tokens.start, tokens.end, tokens.message, tokens.channel) == (200006, 200007, 200008, 200005)
    assert (tokens.return_, tokens.call, tokens.constrain) == (200002, 200012, 200003)
    assert HARMONY_IDS["<|start|>"] == tokens.start


def test_a_tokenizer_without_the_markers_is_refused():
    with pytest.raises(ValueError, match=r"no <\|start\|> token"):
        HarmonyReasoningParser(build_tokenizer())


def test_analysis_then_final(parser):
    prompt = prompt_ids()
    assert prompt[-3:] == [HARMONY_IDS["<|start|>"], *ids("assistant")]
    assert len(ids("analysis")) > 1  # the channel's name spans several tokens, read as text all the same
    reasoning = ids("<|channel|>analysis<|message|>The capital is Paris.<|end|>")
    answer = ids("<|start|>assistant<|channel|>final<|message|>Paris.<|return|>")
    split = parser.split(prompt, reasoning + answer)
    assert text(split.reasoning_ids) == "The capital is Paris."
    assert text(split.answer_ids) == "Paris."
    assert split.reasoning_closed
    seen = phases(parser, prompt, reasoning + answer)
    opened = reasoning.index(HARMONY_IDS["<|message|>"])
    final_opened = len(reasoning) + answer.index(HARMONY_IDS["<|message|>"])
    assert set(seen[:opened]) == {Phase.PREAMBLE}
    assert set(seen[opened:final_opened]) == {Phase.REASONING}  # the final's header still counts as thinking
    assert set(seen[final_opened:]) == {Phase.ANSWER}


def test_cut_in_analysis_by_max_tokens(parser):
    output = ids("<|channel|>analysis<|message|>Let me think about")
    split = parser.split(prompt_ids(), output)
    assert text(split.reasoning_ids) == "Let me think about"
    assert split.answer_ids == []
    assert not split.reasoning_closed
    assert phases(parser, prompt_ids(), output)[-1] is Phase.REASONING


def test_no_analysis_at_all(parser):
    output = ids("<|channel|>final<|message|>Paris.<|return|>")
    split = parser.split(prompt_ids(), output)
    assert (split.reasoning_ids, text(split.answer_ids), split.reasoning_closed) == ([], "Paris.", True)
    assert phases(parser, prompt_ids(), output)[-1] is Phase.ANSWER


def test_prompt_with_the_analysis_channel_already_open(parser):
    prompt = prompt_ids() + ids("<|channel|>analysis<|message|>")
    output = ids("Paris, surely.<|end|><|start|>assistant<|channel|>final<|message|>Paris.<|return|>")
    assert parser.start(prompt) is Phase.REASONING
    split = parser.split(prompt, output)
    assert (text(split.reasoning_ids), text(split.answer_ids)) == ("Paris, surely.", "Paris.")
    assert parser.start(prompt_ids() + ids("<|channel|>final<|message|>")) is Phase.ANSWER


def test_forced_end_of_reasoning_opens_the_answer(parser):
    forced = parser.end_of_reasoning_ids()
    assert forced == ids("<|end|><|start|>assistant<|channel|>final<|message|>")
    assert forced[:2] == [HARMONY_IDS["<|end|>"], HARMONY_IDS["<|start|>"]] and forced[-1] == HARMONY_IDS["<|message|>"]
    output = ids("<|channel|>analysis<|message|>hmm hmm") + forced + ids("Paris.")
    assert phases(parser, prompt_ids(), output)[-len(ids("Paris.")) - 1:] == [Phase.ANSWER] * (len(ids("Paris.")) + 1)
    split = parser.split(prompt_ids(), output)
    assert (text(split.reasoning_ids), text(split.answer_ids), split.reasoning_closed) == ("hmm hmm", "Paris.", True)


def test_stray_markers(parser):
    # A <|message|> inside the analysis is its text, not a new message; stray terminators between messages
    # are skipped; text written outside any message is the answer's.
    output = ids("<|channel|>analysis<|message|>a<|message|>b<|end|><|end|><|return|>Paris.")
    assert phases(parser, prompt_ids(), output)[-1] is Phase.REASONING
    split = parser.split(prompt_ids(), output)
    assert (text(split.reasoning_ids), text(split.answer_ids), split.reasoning_closed) == ("ab", "Paris.", True)


def test_an_analysis_left_unterminated_ends_where_the_next_message_starts(parser):
    output = ids("<|channel|>analysis<|message|>think<|start|>assistant<|channel|>final<|message|>Paris.")
    split = parser.split(prompt_ids(), output)
    assert (text(split.reasoning_ids), text(split.answer_ids), split.reasoning_closed) == ("think", "Paris.", True)
    cut_in_header = ids("<|channel|>analysis<|message|>think<|start|>assistant<|channel|>fi")
    assert parser.split(prompt_ids(), cut_in_header).reasoning_closed


def test_a_model_that_ignores_the_format_answers_in_plain_text(parser):
    output = ids("Paris is the capital.")
    split = parser.split(prompt_ids(), output)
    assert (split.reasoning_ids, text(split.answer_ids)) == ([], "Paris is the capital.")
    assert set(phases(parser, prompt_ids(), output)) == {Phase.PREAMBLE}


def test_a_header_cut_short_is_left_out(parser):
    output = ids("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>fin")
    split = parser.split(prompt_ids(), output)
    assert (text(split.reasoning_ids), split.answer_ids, split.reasoning_closed) == ("think", [], True)


@pytest.mark.parametrize("call", [
    "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>",
])
def test_a_tool_call_after_the_analysis(parser, tools, call):
    arguments = '{"city": "Paris"}'
    output = ids(f"<|channel|>analysis<|message|>Need the weather.<|end|>{call}{arguments}<|call|>")
    split = parser.split(prompt_ids(), output)
    assert text(split.reasoning_ids) == "Need the weather."
    parsed = tools.parse(text(split.answer_ids), split.answer_ids)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("get_weather", arguments)]
    assert parsed.content is None


def test_a_tool_call_the_prompt_opened(parser, tools):
    """The recipient after the channel, the whole header written by the model right after the prompt."""
    output = ids('<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>{"q": 1}<|call|>')
    assert phases(parser, prompt_ids(), output)[-1] is Phase.ANSWER
    split = parser.split(prompt_ids(), output)
    parsed = tools.parse(text(split.answer_ids), split.answer_ids)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("lookup", {"q": 1})]


def test_final_text_beside_a_call_is_the_content(parser, tools):
    output = ids('<|channel|>final<|message|>Checking.<|end|>'
                 '<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>')
    split = parser.split(prompt_ids(), output)
    parsed = tools.parse(text(split.answer_ids), split.answer_ids)
    assert (parsed.content, [c.name for c in parsed.tool_calls]) == ("Checking.", ["f"])


def test_arguments_that_are_not_json_stay_in_the_content(tools):
    answer = ids("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{not json<|call|>")
    parsed = tools.parse(text(answer), answer)
    assert parsed.tool_calls == [] and "{not json" in parsed.content


def test_an_answer_with_no_call_keeps_its_text(tools):
    parsed = tools.parse("Paris.", ids("Paris."))
    assert (parsed.content, parsed.tool_calls) == ("Paris.", [])


def test_calls_as_gpt_oss_template_writes_them(tools):
    """An assistant turn with a tool call, written by gpt-oss's own template, reads back as that call."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    history = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [call]}]
    rendered = prompt_ids(history)
    end = rendered.index(HARMONY_IDS["<|call|>"]) + 1
    start = max(i for i, token in enumerate(rendered[:end]) if token == HARMONY_IDS["<|start|>"])
    answer = rendered[start:end]
    parsed = tools.parse(text(answer), answer)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("get_weather", {"city": "Paris"})]
