"""Structured outputs: every output that stops is valid, every cut one is a valid prefix, whatever the
random model prefers. The tiny checkpoints' byte-level tokenizer can spell any printable ASCII, so
the grammar, not the vocabulary, decides what comes out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import llguidance
import llguidance.torch
import pytest

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.grammar import JSON_FORMAT

DATA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
TICKET = {"type": "object", "properties": {"label": {"enum": ["bug", "feature", "question"]},
                                           "urgent": {"type": "boolean"}},
          "required": ["label", "urgent"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm(tiny_llama) -> LLM:
    return LLM(str(tiny_llama), max_model_len=512)


def sample_schemas() -> list[tuple[str, dict]]:
    return [(f"{path.stem}/{row['name']}", row["schema"]) for path in sorted(DATA.glob("*.jsonl"))
            for row in map(json.loads, path.read_text().splitlines())]


def is_prefix(llm: LLM, schema: dict, token_ids: list[int]) -> bool:
    """Whether the grammar allowed each of these tokens in turn: a fresh matcher, its mask asked at every
    position as the engine asks it, has each token in its mask and consumes it."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_FORMAT)
    matcher = llguidance.LLMatcher(llm.grammars.tokenizer, grammar, log_level=0)
    mask = llguidance.torch.allocate_token_bitmask(1, llm.model_config.vocab_size)
    for token in token_ids:
        llguidance.torch.fill_next_token_bitmask(matcher, mask, 0)
        if not (int(mask[0, token // 32]) >> (token % 32)) & 1 or not matcher.consume_token(token):
            return False
    return True


def check_json(llm: LLM, schema: dict, completion) -> None:
    if completion.finish_reason == "stop":
        jsonschema.validate(json.loads(completion.text), schema)
    else:
        assert completion.finish_reason == "length"
        assert is_prefix(llm, schema, completion.token_ids), completion.text


def test_json_schema_outputs_validate(llm):
    params = SamplingParams(json=TICKET, temperature=1.0, seed=0, max_tokens=40, n=8)
    (output,) = llm.generate(["Ticket: the app crashes"], params, use_tqdm=False)
    reasons = [c.finish_reason for c in output.outputs]
    assert reasons == ["stop"] * 8  # the enum and the boolean leave nothing open-ended
    for completion in output.outputs:
        jsonschema.validate(json.loads(completion.text), TICKET)
        assert completion.text.startswith('{"label": "')  # json.dumps's spacing


def test_a_schema_as_json_text_is_the_same_constraint(llm):
    as_dict = SamplingParams(json=TICKET, temperature=0, max_tokens=40)
    as_text = SamplingParams(json=json.dumps(TICKET), temperature=0, max_tokens=40)
    outputs = llm.generate(["a", "a"], [as_dict, as_text], use_tqdm=False)
    assert outputs[0].outputs[0].text == outputs[1].outputs[0].text


def test_json_object_and_cut_outputs_are_valid_prefixes(llm):
    params = SamplingParams(json_object=True, temperature=1.0, seed=1, max_tokens=6, n=4)
    (output,) = llm.generate(["Write JSON:"], params, use_tqdm=False)
    for completion in output.outputs:
        check_json(llm, {"type": "object"}, completion)
        assert completion.text.startswith("{")


def test_choices_are_choices(llm):
    choices = ["positive", "negative", "neutral", "pos"]
    params = SamplingParams(choice=choices, temperature=1.5, seed=2, max_tokens=10, n=12)
    (output,) = llm.generate(["Sentiment:"], params, use_tqdm=False)
    texts = [c.text for c in output.outputs]
    assert all(text in choices for text in texts), texts
    assert all(c.finish_reason == "stop" for c in output.outputs)
    assert len(set(texts)) > 1  # sampled, not forced to one


def test_regex_outputs_fully_match(llm):
    pattern = r"[A-Z]{2}-[0-9]{3,5}"
    params = SamplingParams(regex=pattern, temperature=1.0, seed=3, max_tokens=12, n=8)
    (output,) = llm.generate(["Code:"], params, use_tqdm=False)
    stopped = [c.text for c in output.outputs if c.finish_reason == "stop"]
    assert stopped and all(re.fullmatch(pattern, text) for text in stopped), stopped


def test_lark_grammar(llm):
    grammar = 'start: "(" num ("," num)* ")"\nnum: /[0-9]{1,3}/'
    params = SamplingParams(grammar=grammar, temperature=1.0, seed=4, max_tokens=30, n=4)
    (output,) = llm.generate(["Tuple:"], params, use_tqdm=False)
    for completion in output.outputs:
        if completion.finish_reason == "stop":
            assert re.fullmatch(r"\((\d{1,3})(,\d{1,3})*\)", completion.text), completion.text


def test_an_unsupported_schema_is_that_requests_error(llm):
    bad = SamplingParams(json={"type": "strin"})
    good = SamplingParams(choice=["a", "b"], temperature=0)
    outputs = llm.generate(["x", "y", "z"], [good, bad, SamplingParams(max_tokens=3)], use_tqdm=False)
    assert outputs[1].error.startswith("unsupported schema: ")
    assert outputs[0].error is None and outputs[0].outputs[0].text in ("a", "b")
    assert outputs[2].error is None and len(outputs[2].outputs[0].token_ids) <= 3


def test_two_constraints_are_refused():
    with pytest.raises(ValueError, match="at most one"):
        SamplingParams(regex="a", choice=["a"])
    with pytest.raises(ValueError, match="not valid JSON"):
        SamplingParams(json="{nope")


def test_a_compiled_grammar_is_shared_and_masks_touch_constrained_rows_only(llm):
    before = llm.stats.grammar_mask_rows
    params = [SamplingParams(json=TICKET, temperature=0.8, seed=i, max_tokens=30) for i in range(6)]
    params += [SamplingParams(max_tokens=5, ignore_eos=True)] * 6
    outputs = llm.generate([f"row {i}" for i in range(12)], params, use_tqdm=False)
    assert llm.grammars.get(params[0].constraint) is llm.grammars.get(params[5].constraint)
    constrained_tokens = sum(len(o.outputs[0].token_ids) for o in outputs[:6])
    masked = llm.stats.grammar_mask_rows - before
    # One mask per sampled token of a constrained row; tokens the grammar forced took none.
    assert 6 <= masked <= constrained_tokens
    assert llm.stats.jump_forward_tokens > 0


def test_jump_forward_does_not_change_greedy_output(llm):
    params = SamplingParams(json=TICKET, temperature=0, max_tokens=40)
    (fast,) = llm.generate(["Ticket: slow"], params, use_tqdm=False)
    # With logprobs on, no token is forced ahead: each one comes from its own forward pass.
    (slow,) = llm.generate(["Ticket: slow"], SamplingParams(json=TICKET, temperature=0, max_tokens=40, logprobs=0),
                           use_tqdm=False)
    assert fast.outputs[0].text == slow.outputs[0].text


def test_a_seeded_constrained_request_does_not_depend_on_its_batch(tiny_llama):
    llm = LLM(str(tiny_llama), max_model_len=256, deterministic=True, enable_prefix_caching=False)
    params = SamplingParams(json={"type": "object"}, temperature=1.0, seed=11, max_tokens=24)
    (alone,) = llm.generate(["Describe a cat"], params, use_tqdm=False)
    others = [SamplingParams(regex="[a-z ]+", temperature=1.0, max_tokens=20),
              SamplingParams(max_tokens=12, temperature=1.0), SamplingParams(json=TICKET, temperature=0.5)]
    mixed = llm.generate(["other one", "Describe a cat", "x y z", "third"], [others[0], params, *others[1:]],
                         use_tqdm=False)
    assert mixed[1].outputs[0].token_ids == alone.outputs[0].token_ids


def test_real_schemas_from_jsonschemabench(llm):
    """150 schemas of six JSONSchemaBench categories, one request each, a few tokens: refused ones are
    errors that name the schema problem, the rest stop valid or are cut as valid prefixes."""
    schemas = sample_schemas()
    assert len(schemas) >= 100
    params = [SamplingParams(json=schema, temperature=1.0, seed=i, max_tokens=16) for i, (_, schema) in
              enumerate(schemas)]
    outputs = llm.generate(["{"] * len(schemas), params, use_tqdm=False)
    refused = [name for (name, _), output in zip(schemas, outputs) if output.error]
    assert all(output.error.startswith("unsupported schema: ") for output in outputs if output.error)
    assert len(refused) <= 15, refused
    for (name, schema), output in zip(schemas, outputs):
        if not output.error:
            check_json(llm, schema, output.outputs[0])


@pytest.mark.slow
def test_real_schemas_run_to_the_end(llm):
    schemas = sample_schemas()
    params = [SamplingParams(json=schema, temperature=0.7, seed=i, max_tokens=300) for i, (_, schema) in
              enumerate(schemas)]
    outputs = llm.generate(["{"] * len(schemas), params, use_tqdm=False)
    stopped = 0
    for (name, schema), output in zip(schemas, outputs):
        if not output.error:
            check_json(llm, schema, output.outputs[0])
            stopped += output.outputs[0].finish_reason == "stop"
    assert stopped >= 30
