"""Constraints the grammar library cannot follow: the request fails with the library's reason, never
`stop` with text that does not match, whether the library gives up at the first mask, while
generating, or while forcing tokens (jump-forward); the other requests of the batch run on."""

from __future__ import annotations

import re

import pytest

from bulkinfer import LLM, SamplingParams

RECURSIVE_REF = {"$ref": "#/$defs/node", "$defs": {"node": {
    "type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]}}}


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    return LLM(str(tiny_llama), max_model_len=256)


@pytest.mark.parametrize("logprobs", [None, 1])  # with logprobs, no jump-forward: every token is sampled
def test_constraints_the_library_gives_up_on_are_errors(llm, logprobs):
    constraints = [{"regex": "(a{1000}){1000}"}, {"json": RECURSIVE_REF}, {"grammar": 'root ::= root "a"'},
                   {"regex": "[a-z]{2}[0-9]"}]
    params = [SamplingParams(temperature=1.0, seed=5, n=2, max_tokens=24, logprobs=logprobs, **constraint)
              for constraint in constraints]
    outputs = llm.generate(["go"] * len(params), params, use_tqdm=False)
    assert outputs[0].error == "regex could not be followed: lexer error: too many expressions constructed"
    assert outputs[1].error.startswith("schema could not be followed: parser error: Too many items")
    assert outputs[2].error == "unsupported grammar: nothing this model can write matches it"
    assert all(output.outputs == [] for output in outputs[:3])
    assert outputs[3].error is None
    assert all(re.fullmatch("[a-z]{2}[0-9]", c.text) and c.finish_reason == "stop" for c in outputs[3].outputs)
    assert not llm.has_unfinished_requests()


def test_a_regex_that_matches_nothing_is_refused(llm):
    (output,) = llm.generate(["go"], SamplingParams(regex="x[^\\s\\S]|y[^\\s\\S]"), use_tqdm=False)
    assert output.error == "unsupported regex: nothing this model can write matches it"


def test_thousands_of_choices_are_followed(llm):
    labels = [f"label-{i}" for i in range(3000)]
    outputs = llm.generate(["a", "b"], SamplingParams(choice=labels, temperature=1.0, seed=2, max_tokens=16),
                           use_tqdm=False)
    assert all(output.error is None and output.outputs[0].text in labels for output in outputs), outputs


def test_a_schema_json_cannot_write_is_refused_when_made():
    deep: dict = {}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"a": deep}}
    looped: dict = {"type": "object"}
    looped["properties"] = {"self": looped}
    as_text = '{"a": ' * 3000 + "{}" + "}" * 3000
    for schema in (deep, looped, as_text):
        with pytest.raises(ValueError, match="json_schema is nested more than 100 levels deep"):
            SamplingParams(json=schema)
    with pytest.raises(ValueError, match="json_schema is not JSON"):
        SamplingParams(json={"enum": {1, 2}})
