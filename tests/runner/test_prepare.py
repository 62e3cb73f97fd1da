"""The bad-row catalogue up to the engine: each unusable row becomes an error naming the row and why."""

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.base import EngineFacts
from bulkinfer.runner.tasks.generate import GenerateTask

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def tokenizer(tiny_llama: Path):
    return AutoTokenizer.from_pretrained(str(tiny_llama))


def _prepare(tokenizer, rows: list, **settings):
    config = JobConfig.from_settings(model="m", input=["i"], output="o", max_tokens=8, **settings)
    window = [SourceRow(i, values, f"in.jsonl line {i + 1}") for i, values in enumerate(rows)]
    return GenerateTask(config, EngineFacts(tokenizer, MAX_MODEL_LEN)).prepare(window)


def _errors(prepared) -> dict[int, str]:
    return {failure.row.index: failure.error for failure in prepared.failures}


def test_each_kind_of_bad_prompt_gets_its_own_message(tokenizer) -> None:
    prepared = _prepare(tokenizer, [
        {"prompt": "fine"}, {"other": 1}, {"prompt": None}, {"prompt": 42}, {"prompt": "  "},
        {"prompt": "word " * 200},
    ])
    too_long = len(tokenizer("word " * 200)["input_ids"])
    assert _errors(prepared) == {
        1: "in.jsonl line 2: no 'prompt' field",
        2: "in.jsonl line 3: 'prompt' is null",
        3: "in.jsonl line 4: 'prompt' must be a string, got int",
        4: "in.jsonl line 5: 'prompt' is empty",
        5: f"in.jsonl line 6: prompt is {too_long} tokens; with max_tokens 8 it exceeds max_model_len 64 "
           "(set truncate to 'left' or 'right' to cut it)",
    }
    assert [work.row.index for work in prepared.work] == [0]
    assert prepared.failures[-1].prompt_tokens == too_long


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncation_leaves_room_for_max_tokens(tokenizer, side: str) -> None:
    text = " ".join(f"w{i}" for i in range(100))
    full = tokenizer(text)["input_ids"]
    [work] = _prepare(tokenizer, [{"prompt": text}], truncate=side).work
    assert len(work.token_ids) == MAX_MODEL_LEN - 8
    assert work.token_ids == (full[-56:] if side == "left" else full[:56])


def test_truncate_prompt_tokens_keeps_the_last_tokens_of_a_row(tokenizer) -> None:
    text = " ".join(f"w{i}" for i in range(100))
    far_too_long = "x " * (16 * MAX_MODEL_LEN) + text  # past the characters that are ever tokenized
    full = tokenizer(text)["input_ids"]
    rows = [{"prompt": text, "keep": 5}, {"prompt": far_too_long, "keep": 7}]
    work = _prepare(tokenizer, rows, param_columns={"truncate_prompt_tokens": "keep"}).work
    assert [w.token_ids for w in sorted(work, key=lambda w: w.row.index)] == [full[-5:], full[-7:]]


def test_max_tokens_that_leave_no_room_fail_the_row(tokenizer) -> None:
    prepared = _prepare(tokenizer, [{"prompt": "a", "budget": 64}], param_columns={"max_tokens": "budget"})
    assert "max_tokens 64 leaves no room for a prompt within max_model_len 64" in prepared.failures[0].error


def test_chat_messages_render_with_the_template_and_system_prompt(tokenizer) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    prepared = _prepare(tokenizer, [{"chat": messages}], messages_column="chat", system_prompt="Be brief.")
    expected = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, *messages],
                                             tokenize=False, add_generation_prompt=True)
    assert prepared.work[0].token_ids == tokenizer(expected, add_special_tokens=False)["input_ids"]
    assert prepared.work[0].token_ids.count(tokenizer.bos_token_id) == 1  # the template writes BOS


@pytest.mark.parametrize("messages, reason", [
    ("hello", "'chat' must be a non-empty list of {role, content} messages"),
    ([], "'chat' must be a non-empty list of {role, content} messages"),
    (["hi"], "'chat' message 1 is not an object"),
    ([{"role": "user"}], "'chat' message 1 needs a string 'content'"),
    ([{"role": "user", "content": [{"type": "image"}]}], "'chat' message 1 needs a string 'content'"),
])
def test_bad_messages_are_error_rows(tokenizer, messages, reason: str) -> None:
    prepared = _prepare(tokenizer, [{"chat": messages}], messages_column="chat")
    assert prepared.failures[0].error == f"in.jsonl line 1: {reason}"


# Loops four million times (seconds of work, and hours at the 100,000 x 100,000) when a row says "loop".
_LOOPING_TEMPLATE = ("{% if messages[0]['content'] == 'loop' %}{% for i in range(2000) %}{% for j in range(2000) %}"
                     "{% endfor %}{% endfor %}{% endif %}{{ messages[0]['content'] }}")


def test_a_chat_template_past_its_limits_fails_only_its_row(tokenizer) -> None:
    hostile = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    hostile.chat_template = _LOOPING_TEMPLATE
    rows = [{"chat": [{"role": "user", "content": text}]} for text in ("hi", "loop", "bye")]
    prepared = _prepare(hostile, rows, messages_column="chat")
    assert _errors(prepared) == {1: "in.jsonl line 2: chat template stopped: more than 1,000,000 steps "
                                    "(loop iterations, calls, lookups)"}
    assert len(prepared.work) == 2


def test_a_chat_template_that_does_not_compile_is_refused_in_one_line(tokenizer) -> None:
    broken = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    broken.chat_template = "{% for message in messages %}"
    with pytest.raises(UsageError, match="^messages_column is set, but the model's chat template failed: ") as info:
        _prepare(broken, [], messages_column="chat")
    assert "\n" not in str(info.value)


def test_a_tokenizer_without_chat_template_refuses_messages(tokenizer) -> None:
    plain = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    plain.chat_template = None
    with pytest.raises(UsageError, match="has no chat template"):
        _prepare(plain, [], messages_column="chat")


def test_per_row_settings_and_seeds(tokenizer) -> None:
    prepared = _prepare(tokenizer, [
        {"prompt": "a", "budget": 3, "temp": None}, {"prompt": "b", "budget": 5.0, "temp": 0},
        {"prompt": "c", "budget": "lots"}, {"prompt": "d", "budget": -1},
    ], param_columns={"max_tokens": "budget", "temperature": "temp"}, seed=100)
    params = {work.row.index: work.params for work in prepared.work}
    assert (params[0].max_tokens, params[0].temperature, params[0].seed) == (3, 1.0, 100)
    assert (params[1].max_tokens, params[1].temperature, params[1].seed) == (5, 0.0, 101)
    assert _errors(prepared) == {
        2: "in.jsonl line 3: column 'budget' (max_tokens) must be an integer, got 'lots'",
        3: "in.jsonl line 4: max_tokens must be >= 1, got -1",
    }


def test_rows_run_by_length_bin_with_shared_prefixes_together(tokenizer) -> None:
    shared = "You are a careful assistant. Answer in one word. "
    rows = [{"prompt": "short"}, {"prompt": shared + "What is red?"}, {"prompt": "x " * 30},
            {"prompt": "tiny"}, {"prompt": shared + "What is blue?"}]
    order = [work.row.index for work in _prepare(tokenizer, rows).work]
    lengths = [len(work.token_ids) for work in _prepare(tokenizer, rows).work]
    assert [n.bit_length() for n in lengths] == sorted(n.bit_length() for n in lengths)
    assert abs(order.index(1) - order.index(4)) == 1
