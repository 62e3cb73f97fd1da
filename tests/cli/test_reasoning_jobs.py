"""Jobs of thinking models: the reasoning in its own column, the answer alone in generated_text, a thinking
budget, a schema that shapes the answer; OpenAI batch output with reasoning_content."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from cli_helpers import exported, invoke, one_line_error
from openai.types.chat import ChatCompletion

TICKET = {"type": "object", "properties": {"label": {"enum": ["bug", "feature"]}, "urgent": {"type": "boolean"}},
          "required": ["label", "urgent"], "additionalProperties": False}


@pytest.fixture(scope="module")
def qwen3_dir(checkpoint_factory) -> Path:
    return checkpoint_factory("qwen3", tokenizer="qwen3")


def _messages_input(tmp_path: Path, rows: int) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"ticket {i}: it crashes"}]}) + "\n"
                            for i in range(rows)))
    return path


def test_a_schema_job_with_a_thinking_budget(capsys, tmp_path: Path, qwen3_dir: Path) -> None:
    """The issue's example: reasoning of at most the budget, an answer that validates."""
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(TICKET))
    code, _, err = invoke(capsys, "run", "--model", qwen3_dir, "--input", _messages_input(tmp_path, 4),
                          "--messages-column", "messages", "--output", tmp_path / "out", "--json-schema", schema,
                          "--thinking-budget", "16", "--max-tokens", "64", "--temperature", "0.8", "--seed", "1")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    for row in rows:
        assert row["finish_reason"] == "stop" and row["error"] is None
        jsonschema.validate(json.loads(row["generated_text"]), TICKET)
        assert row["generated_reasoning"] and row["reasoning_tokens"] == 16
        assert "</think>" not in row["generated_text"]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["reasoning_tokens"] == 16 * len(rows)
    assert stats["reasoning_tokens"] + stats["answer_tokens"] == sum(row["completion_tokens"] for row in rows)


def test_a_model_without_a_parser_has_no_reasoning_columns(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", _messages_input(tmp_path, 2),
                          "--messages-column", "messages", "--output", tmp_path / "out", "--max-tokens", "4")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    assert "generated_reasoning" not in rows[0] and "reasoning_tokens" not in rows[0]
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", _messages_input(tmp_path, 2),
                          "--messages-column", "messages", "--output", tmp_path / "budget", "--thinking-budget", "8")
    assert "thinking_budget needs a reasoning parser" in one_line_error(code, err)
    assert not (tmp_path / "budget").exists()


def test_openai_batch_output_has_reasoning_content(capsys, tmp_path: Path, qwen3_dir: Path) -> None:
    body = {"model": "m", "max_completion_tokens": 64, "temperature": 0, "thinking_budget": 6}
    requests = [{"custom_id": "think", "method": "POST", "url": "/v1/chat/completions",
                 "body": {**body, "messages": [{"role": "user", "content": "hi"}], "response_format": {
                     "type": "json_schema", "json_schema": {"name": "t", "schema": TICKET}}}},
                {"custom_id": "free", "method": "POST", "url": "/v1/chat/completions",
                 "body": {**body, "messages": [{"role": "user", "content": "hello"}]}}]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(request) + "\n" for request in requests))
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "out.jsonl", "--model", qwen3_dir)
    assert code == 0, err
    lines = {line["custom_id"]: line for line in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    think = ChatCompletion.model_validate(lines["think"]["response"]["body"])
    message = think.choices[0].message
    assert message.model_extra["reasoning_content"]  # what the model wrote before its answer
    jsonschema.validate(json.loads(message.content), TICKET)
    assert think.usage.completion_tokens_details.reasoning_tokens == 6
    free = lines["free"]["response"]["body"]["choices"][0]["message"]
    assert "reasoning_content" in free  # null when the model answered at once


def test_the_reasoning_parser_is_part_of_the_job(capsys, tmp_path: Path, qwen3_dir: Path) -> None:
    """It decides what generated_text holds: a job run without a parser does not resume with one."""
    data = _messages_input(tmp_path, 2)
    base = ("run", "--model", qwen3_dir, "--input", data, "--messages-column", "messages", "--output",
            tmp_path / "out", "--max-tokens", "4")
    code, _, err = invoke(capsys, *base, "--reasoning-parser", "none")
    assert code == 0, err
    assert "generated_reasoning" not in exported(capsys, tmp_path / "out")[0]
    code, _, err = invoke(capsys, *base)
    assert "reasoning_parser" in one_line_error(code, err)


def test_a_native_gpt_oss_job_returns_its_analysis_as_generated_reasoning(capsys, tmp_path: Path,
                                                                          tiny_gpt_oss: Path) -> None:
    """auto picks the harmony parser for gpt-oss; prompts open the analysis channel, a thinking budget of 4 closes
    it: the analysis is the reasoning column, the final channel alone the text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_gpt_oss)
    opened = "<|channel|>analysis<|message|>"
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"ticket {i}: it crashes"}], tokenize=False,
                                             add_generation_prompt=True) + opened for i in range(2)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for prompt in prompts))
    code, _, err = invoke(capsys, "run", "--model", tiny_gpt_oss, "--input", source, "--output", tmp_path / "out",
                          "--thinking-budget", "4", "--max-tokens", "12", "--temperature", "0")
    assert code == 0, err
    for row in exported(capsys, tmp_path / "out"):
        assert row["error"] is None and row["reasoning_tokens"] == 4
        assert row["generated_reasoning"] and "<|channel|>" not in row["generated_text"]
