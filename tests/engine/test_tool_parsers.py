"""Tool-call parsers on hand-written answers, with each family's tokenizer: calls found, the text around them
kept as content, a call that does not parse kept as the text the model wrote. Markers that are special
tokens are missing from the engine's text, so each answer is given as the engine gives it: its text with
special tokens left out, and its ids."""

from __future__ import annotations

import json
import re

import pytest
from checkpoints import build_tokenizer
from tool_checkpoints import FAMILIES, tool_tokenizer

from bulkinfer.engine.tools.calls import call_id
from bulkinfer.engine.tools.registry import auto_parser_name, tool_call_parser


def parse(family: str, written: str):
    tokenizer = tool_tokenizer(family)
    ids = tokenizer.encode(written, add_special_tokens=False)
    return tool_call_parser(family, tokenizer).parse(tokenizer.decode(ids, skip_special_tokens=True), ids)


def calls_of(parsed) -> list[tuple[str, dict]]:
    return [(call.name, json.loads(call.arguments)) for call in parsed.tool_calls]


WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
TIME = '{"name": "get_time", "arguments": {"zone": "CET"}}'
EXPECTED = [("get_weather", {"city": "Paris", "days": 2}), ("get_time", {"zone": "CET"})]


def test_hermes_reads_several_calls_and_keeps_the_text_before_them():
    parsed = parse("hermes", f"Let me look.\n<tool_call>\n{WEATHER}\n</tool_call>\n<tool_call>\n{TIME}\n</tool_call>")
    assert calls_of(parsed) == EXPECTED
    assert parsed.content == "Let me look."


def test_hermes_keeps_a_malformed_call_as_content_and_reads_the_good_one():
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {city: Paris}}\n</tool_call>'
    parsed = parse("hermes", f"{broken}\n<tool_call>\n{TIME}\n</tool_call>")
    assert calls_of(parsed) == EXPECTED[1:]
    assert parsed.content == broken


def test_a_marker_in_the_text_is_read_from_the_text_which_the_ids_may_outrun():
    """A reasoning model's answer ids may begin with its end-of-thinking marker, which its text leaves out."""
    tokenizer = tool_tokenizer("hermes")
    written = f"<tool_call>\n{TIME}\n</tool_call>"
    ids = tokenizer.encode(f"</think>\n\n{written}", add_special_tokens=False)
    parsed = tool_call_parser("hermes", tokenizer).parse(written, ids)
    assert (parsed.content, calls_of(parsed)) == (None, EXPECTED[1:])


def test_hermes_without_calls_is_all_content():
    parsed = parse("hermes", "It is sunny in Paris.")
    assert (parsed.content, parsed.tool_calls) == ("It is sunny in Paris.", [])


LLAMA_WEATHER = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}'
LLAMA_TIME = '{"name": "get_time", "parameters": {"zone": "CET"}}'


@pytest.mark.parametrize("written", [f"{LLAMA_WEATHER}; {LLAMA_TIME}", f"<|python_tag|>{LLAMA_WEATHER};{LLAMA_TIME}"])
def test_llama3_json_reads_calls_with_or_without_the_python_tag(written):
    parsed = parse("llama3_json", written)
    assert calls_of(parsed) == EXPECTED
    assert parsed.content is None


def test_llama3_json_keeps_the_text_before_the_python_tag():
    parsed = parse("llama3_json", 'Checking.<|python_tag|>{"name": "get_time", "parameters": {"zone": "CET"}}')
    assert (parsed.content, calls_of(parsed)) == ("Checking.", EXPECTED[1:])


@pytest.mark.parametrize("written", [
    '{"answer": 4}',  # JSON, but no call
    '{"name": "get_time", "parameters": {"zone": "CET"}',  # cut before its end
    'The call would be {"name": "get_time", "parameters": {}}',  # text first, no python tag
    '{"name": "get_time", "parameters": {}} and then some words',
])
def test_llama3_json_keeps_anything_but_calls_as_content(written):
    parsed = parse("llama3_json", written)
    assert (parsed.content, parsed.tool_calls) == (written, [])


def test_mistral_reads_the_list_after_its_marker_token():
    parsed = parse("mistral", f"Sure. [TOOL_CALLS][{WEATHER}, {TIME}]")
    assert calls_of(parsed) == EXPECTED
    assert parsed.content == "Sure."


def test_mistral_keeps_a_malformed_list_as_the_text_the_model_wrote():
    written = '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "CET"}'
    parsed = parse("mistral", written)
    assert (parsed.content, parsed.tool_calls) == (written, [])


def test_arguments_written_as_json_text_stay_that_text():
    parsed = parse("mistral", '[TOOL_CALLS][{"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\"}"}]')
    assert parsed.tool_calls[0].arguments == '{"zone": "CET"}'


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_picks_the_family_whose_markers_the_template_writes(family):
    assert auto_parser_name(tool_tokenizer(family)) == family


def test_auto_picks_none_for_a_template_without_tools():
    assert auto_parser_name(build_tokenizer()) == "none"
    assert tool_call_parser("auto", build_tokenizer()) is None


def test_call_ids_are_openai_shaped_and_depend_only_on_request_sample_and_place():
    ids = {call_id(request, sample, number) for request in (7, "generate-7") for sample in (0, 1) for number in (0, 1)}
    assert len(ids) == 8
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", found) for found in ids)
    assert call_id(7, 1, 0) == call_id(7, 1, 0)
