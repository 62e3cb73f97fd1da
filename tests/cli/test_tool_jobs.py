"""Tools and chat template arguments in jobs and OpenAI batch files: --chat-template-kwargs and --tools reach
the chat template, a bad value is one line, and forced tool calls come back as a tool_calls column and as
OpenAI's message.tool_calls, validating against the tools' schemas (and the openai package's types)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
from checkpoints import build_tokenizer
from cli_helpers import DEMO_MODEL, exported, invoke, one_line_error
from openai.types.chat import ChatCompletion
from tool_checkpoints import make_tool_checkpoint

from bulkinfer.openai_batch.convert import convert_batch_file

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                       "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                       "required": ["zone"], "additionalProperties": False}}},
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
# Qwen3's switch, and the tools' names, written where a test can see them.
PROBE_TEMPLATE = ("{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n{% endif %}"
                  "{% for tool in tools or [] %}[tool {{ tool.function.name }}]{% endfor %}"
                  "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}")
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def hermes_model(tmp_path_factory) -> Path:
    return make_tool_checkpoint(tmp_path_factory.mktemp("hermes"), "hermes")


def messages_file(tmp_path: Path, rows: int = 3) -> Path:
    file = tmp_path / "rows.jsonl"
    file.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Weather {i}?"}]}) + "\n"
                            for i in range(rows)))
    return file


def tools_file(tmp_path: Path, tools=TOOLS, name: str = "tools.json") -> Path:
    file = tmp_path / name
    file.write_text(json.dumps(tools))
    return file


def show_prompt(capsys, tmp_path: Path, *options) -> tuple[int, str, str]:
    template = tmp_path / "probe.jinja"
    template.write_text(PROBE_TEMPLATE)
    return invoke(capsys, "inspect", messages_file(tmp_path, 1), "--messages-column", "messages", "--model",
                  DEMO_MODEL, "--chat-template", template, "--show-prompt", "1", *options)


def test_chat_template_kwargs_and_tools_reach_the_template(capsys, tmp_path: Path) -> None:
    code, out, err = show_prompt(capsys, tmp_path, "--chat-template-kwargs", '{"enable_thinking": false}',
                                 "--tools", tools_file(tmp_path))
    assert code == 0, err
    assert "<think>\n\n</think>\n[tool get_weather][tool get_time]<user>Weather 0?" in out
    code, out, err = show_prompt(capsys, tmp_path)
    assert code == 0, err
    assert "<think>" not in out and "[tool" not in out


def test_a_job_file_takes_chat_template_kwargs_as_a_table(capsys, tmp_path: Path) -> None:
    template = tmp_path / "probe.jinja"
    template.write_text(PROBE_TEMPLATE)
    job = tmp_path / "job.toml"
    job.write_text(f'model = "{DEMO_MODEL}"\ninput = "{messages_file(tmp_path, 2)}"\noutput = "{tmp_path / "out"}"\n'
                   f'messages_column = "messages"\nchat_template = "{template}"\nmax_tokens = 2\n'
                   'chat_template_kwargs = {enable_thinking = false}\n')
    code, _, err = invoke(capsys, "run", job)
    assert code == 0, err
    assert all(row["prompt_tokens"] > 20 for row in exported(capsys, tmp_path / "out"))  # the think block counts
    # Other template variables make other prompts: another job, which the output directory refuses.
    code, _, err = invoke(capsys, "run", job, "--chat-template-kwargs", '{"enable_thinking": true}')
    assert "chat_template_kwargs {'enable_thinking': False} -> {'enable_thinking': True}" in one_line_error(code, err)


@pytest.mark.parametrize("value, message", [
    ("{enable_thinking: false}", "chat_template_kwargs is not valid JSON"),
    ("[1, 2]", "chat_template_kwargs must be a JSON object, got [1, 2]"),
])
def test_bad_chat_template_kwargs_are_one_line(capsys, tmp_path: Path, value: str, message: str) -> None:
    code, _, err = invoke(capsys, "run", "--model", DEMO_MODEL, "--input", messages_file(tmp_path), "--output",
                          tmp_path / "out", "--messages-column", "messages", "--chat-template-kwargs", value)
    assert message in one_line_error(code, err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content, message", [
    (None, "tools: no such file"),
    ("[{oops", "tools is not valid JSON"),
    ('[{"type": "function"}]', 'tools[1] must be {"type": "function", "function": {"name": ...}}'),
    ('{"type": "function"}', "tools must be a list of tool definitions, got dict"),
])
def test_a_bad_tools_file_is_one_line(capsys, tmp_path: Path, content: str | None, message: str) -> None:
    file = tmp_path / "tools.json"
    if content is not None:
        file.write_text(content)
    code, _, err = invoke(capsys, "run", "--model", DEMO_MODEL, "--input", messages_file(tmp_path), "--output",
                          tmp_path / "out", "--messages-column", "messages", "--tools", file)
    assert message in one_line_error(code, err)


def test_a_job_with_forced_tool_calls_writes_a_tool_calls_column(capsys, tmp_path: Path, hermes_model) -> None:
    code, _, err = invoke(capsys, "run", "--model", hermes_model, "--input", messages_file(tmp_path, 4),
                          "--output", tmp_path / "out", "--messages-column", "messages", "--tools",
                          tools_file(tmp_path), "--tool-choice", "required", "--max-tokens", "60",
                          "--temperature", "1", "--seed", "5")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    # The random model calls again and again until max_tokens: every call it finished is read and valid.
    calls = [call for row in rows for call in row["tool_calls"]]
    assert calls and all(row["generated_text"] == "" for row in rows if row["finish_reason"] == "stop")
    for call in calls:
        assert set(call) == {"id", "name", "arguments"} and call["id"].startswith("call_")
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
    (shard,) = (tmp_path / "out" / "shards").glob("*.parquet")
    assert str(pq.read_schema(shard).field("tool_calls").type) == \
        "list<element: struct<id: string, name: string, arguments: string>>"


def _request(custom_id: str, **body) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT,
                       "body": {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}],
                                "max_completion_tokens": 60, "temperature": 1, "seed": 9, **body}}) + "\n"


def test_an_openai_batch_with_tools_answers_with_tool_calls(capsys, tmp_path: Path, hermes_model) -> None:
    batch = tmp_path / "batch.jsonl"
    named = {"type": "function", "function": {"name": "get_time"}}
    batch.write_text(_request("required", tools=TOOLS, tool_choice="required", n=3)
                     + _request("named", tools=TOOLS, tool_choice=named)
                     + _request("declined", tools=TOOLS, tool_choice="none", max_completion_tokens=4)
                     + _request("plain", max_completion_tokens=4)
                     + _request("unknown", tools=TOOLS, tool_choice={"type": "function", "function": {"name": "x"}})
                     + _request("broken", tools=[{"type": "function", "function": {}}]))
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "results.jsonl", "--model", hermes_model)
    assert code == 0, err
    errors = {line["custom_id"]: line["response"]["body"]["error"]["message"]
              for line in map(json.loads, (tmp_path / "results.errors.jsonl").read_text().splitlines())}
    assert errors == {"unknown": "line 5: body.tool_choice names the function 'x', which is not among the tools",
                      "broken": "line 6: body.tools[1].function needs a non-empty string name"}
    lines = {line["custom_id"]: line for line in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    made = []
    for custom_id in ("required", "named"):
        for choice in ChatCompletion.model_validate(lines[custom_id]["response"]["body"]).choices:
            assert choice.finish_reason in ("tool_calls", "length")
            if choice.finish_reason == "tool_calls":
                assert choice.message.content is None
            made += [(custom_id, call) for call in choice.message.tool_calls or []]
    assert {custom_id for custom_id, _ in made} == {"required", "named"}
    for custom_id, call in made:
        assert call.type == "function" and call.id.startswith("call_")
        assert custom_id == "required" or call.function.name == "get_time"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    for custom_id in ("declined", "plain"):
        (choice,) = ChatCompletion.model_validate(lines[custom_id]["response"]["body"]).choices
        assert choice.message.tool_calls is None and choice.message.content


def test_a_bodys_chat_template_kwargs_and_tools_reach_the_template(tmp_path: Path) -> None:
    tokenizer = build_tokenizer()
    tokenizer.chat_template = PROBE_TEMPLATE
    batch, table = tmp_path / "batch.jsonl", tmp_path / "table.jsonl"
    batch.write_text(_request("a", chat_template_kwargs={"enable_thinking": False}, tools=TOOLS)
                     + _request("b") + _request("c", chat_template_kwargs=[1]))
    convert_batch_file(batch, table, tokenizer)
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    assert rows[0]["prompt"].startswith("<think>\n\n</think>\n[tool get_weather][tool get_time]<user>")
    assert rows[1]["prompt"].startswith("<user>")
    assert rows[2]["batch_error"] == "line 3: body.chat_template_kwargs must be a JSON object"
