"""Tool calls in the engine, with random tiny models whose tokenizers carry each family's tokens and chat
template: a forced tool_choice makes every finished sample a call that validates against its function's
parameters, in the family's own format, read back by its parser; requests without tools are left alone."""

from __future__ import annotations

import json

import jsonschema
import pytest
from tool_checkpoints import FAMILIES, make_tool_checkpoint

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.chat_template import ChatTemplate

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                       "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                       "required": ["zone"], "additionalProperties": False}}},
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module", params=list(FAMILIES))
def llm(request, tmp_path_factory) -> LLM:
    path = make_tool_checkpoint(tmp_path_factory.mktemp(request.param), request.param)
    return LLM(str(path), dtype="float32", max_model_len=2048)  # seeded samples of a random model, as tuned


def forced(llm: LLM, tool_choice, n: int = 4):
    params = SamplingParams(tool_choice=tool_choice, temperature=1.0, seed=3, n=n, max_tokens=80)
    (output,) = llm.chat(ASK, params, tools=TOOLS, use_tqdm=False)
    assert output.error is None
    return output.outputs


def test_required_gives_calls_that_validate_against_their_functions(llm):
    samples = forced(llm, "required")
    # A random model calls again and again until max_tokens: every call it finished is read and valid.
    calls = [call for sample in samples for call in sample.tool_calls]
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    assert all(sample.text == "" for sample in samples if sample.finish_reason == "stop")


def test_a_named_function_is_the_one_call_made(llm):
    samples = forced(llm, {"type": "function", "function": {"name": "get_weather"}})
    finished = [sample for sample in samples if sample.finish_reason == "stop"]
    assert finished
    for sample in finished:
        (call,) = sample.tool_calls
        assert call.name == "get_weather" and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.arguments), SCHEMAS["get_weather"])


def calls_of_request(llm: LLM, request_id, prompt: str) -> list[str]:
    llm.add_request(request_id, prompt, SamplingParams(tools=TOOLS, tool_choice="required", seed=3, n=2,
                                                       max_tokens=80))
    outputs = []
    while llm.has_unfinished_requests():
        outputs += llm.step()
    return [call.id for sample in outputs[0].outputs for call in sample.tool_calls or []]


def test_call_ids_are_the_same_when_the_request_runs_again(llm):
    """The job runner gives a row the same request id on every run, so a resumed job writes the same ids."""
    prompt = ChatTemplate(llm.tokenizer).render(ASK, tools=TOOLS)
    first = calls_of_request(llm, 41, prompt)
    assert first and len(set(first)) == len(first)
    assert calls_of_request(llm, 41, prompt) == first
    assert not set(calls_of_request(llm, 42, prompt)) & set(first)


def test_requests_without_tools_or_with_tool_choice_none_are_not_parsed(llm):
    plain = SamplingParams(temperature=0, max_tokens=8)
    (without,) = llm.chat(ASK, plain, use_tqdm=False)
    (declined,) = llm.chat(ASK, SamplingParams(temperature=0, max_tokens=8, tool_choice="none"), tools=TOOLS,
                           use_tqdm=False)
    assert without.outputs[0].tool_calls is None and declined.outputs[0].tool_calls is None


def test_auto_reads_calls_only_when_the_model_makes_them(llm):
    (output,) = llm.chat(ASK, SamplingParams(temperature=0, max_tokens=8), tools=TOOLS, use_tqdm=False)
    assert output.outputs[0].tool_calls == []  # a random model writes no call, so all its text is content
    assert output.outputs[0].text


def test_a_forced_call_without_a_tool_format_is_that_requests_error(tiny_llama):
    llm = LLM(str(tiny_llama), max_model_len=256)
    (output,) = llm.generate(["hi"], SamplingParams(tools=TOOLS, tool_choice="required"), use_tqdm=False)
    assert "tool_call_parser" in output.error


def test_a_forced_call_and_another_constraint_are_refused_together():
    with pytest.raises(ValueError, match="constraint of its own"):
        SamplingParams(tools=TOOLS, tool_choice="required", json={"type": "object"})


def test_tool_call_parser_names_the_format_whatever_the_template(tmp_path):
    path = make_tool_checkpoint(tmp_path / "hermes", "hermes")
    params = SamplingParams(tool_choice={"type": "function", "function": {"name": "get_time"}}, seed=3, n=2,
                            max_tokens=80)
    (output,) = LLM(str(path), max_model_len=2048, tool_call_parser="llama3_json").chat(
        ASK, params, tools=TOOLS, use_tqdm=False)
    finished = [sample for sample in output.outputs if sample.finish_reason == "stop"]
    assert finished and all(sample.tool_calls[0].name == "get_time" for sample in finished)
    assert all("<tool_call>" not in sample.text for sample in output.outputs)
    (output,) = LLM(str(path), max_model_len=2048, tool_call_parser="none").chat(
        ASK, SamplingParams(max_tokens=4), tools=TOOLS, use_tqdm=False)
    assert output.outputs[0].tool_calls is None


def test_a_thinking_model_reasons_before_its_forced_call(checkpoint_factory):
    """Qwen3's template writes hermes calls and leaves the thinking to the model: a forced call opens the
    thinking, the budget closes it, and the call that follows is read from the answer alone."""
    llm = LLM(str(checkpoint_factory("qwen3", tokenizer="qwen3", max_position_embeddings=4096)), max_model_len=4096)
    params = SamplingParams(tool_choice={"type": "function", "function": {"name": "get_time"}}, thinking_budget=4,
                            temperature=1.0, seed=3, n=4, max_tokens=60)
    (output,) = llm.chat(ASK, params, tools=TOOLS, use_tqdm=False)
    finished = [sample for sample in output.outputs if sample.finish_reason == "stop"]
    assert finished
    for sample in finished:
        assert sample.num_reasoning_tokens == 4 and "<tool_call>" not in sample.reasoning
        (call,) = sample.tool_calls
        assert call.name == "get_time" and sample.text == ""
        jsonschema.validate(json.loads(call.arguments), SCHEMAS["get_time"])
