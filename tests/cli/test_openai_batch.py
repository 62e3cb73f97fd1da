"""The OpenAI batch file format: request lines in, output lines that the openai package's own types accept."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import DEMO_MODEL, invoke, one_line_error
from openai.types import Completion, ErrorObject
from openai.types.chat import ChatCompletion

from bulkinfer.openai_batch.requests import parse_line

CHAT = "/v1/chat/completions"


def _request(custom_id: str, url: str, **body: object) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "gpt-4o-mini", **body}}


REQUESTS = [
    _request("chat-1", CHAT, messages=[{"role": "user", "content": "12+30="}], max_completion_tokens=8, temperature=0),
    _request("text-1", "/v1/completions", prompt="500+501=", max_tokens=8, temperature=0.7, n=3, seed=4, stop="\n"),
    "not json at all",
    _request("image-1", "/v1/images/generations", prompt="x"),
    _request("chat-2", CHAT),  # no messages
    _request("chat-3", CHAT, messages=[{"role": "user", "content": "1+1="}], temperature=-3),  # engine refuses
]


@pytest.fixture
def batch_file(tmp_path: Path) -> Path:
    path = tmp_path / "batch.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in REQUESTS))
    return path


def test_sampling_comes_from_each_body() -> None:
    chat = parse_line(json.dumps(_request("a", CHAT, messages=[{"role": "user", "content": [
        {"type": "text", "text": "1+"}, {"type": "text", "text": "2="}]}], max_completion_tokens=5, max_tokens=9,
        logprobs=True, top_logprobs=2, stop="x", top_p=1)).encode(), 1).rows[0]
    assert chat["messages"] == [{"role": "user", "content": "1+2="}] and chat["body_model"] == "gpt-4o-mini"
    assert (chat["body_max_tokens"], chat["body_logprobs"], chat["body_stop"], chat["body_top_p"]) == (5, 2, ["x"], 1.0)
    text = parse_line(json.dumps(_request("b", "/v1/completions", prompt=["7+1="], logprobs=3)).encode(), 2).rows[0]
    assert (text["prompt"], text["body_logprobs"], text["body_temperature"]) == ("7+1=", 3, None)


@pytest.mark.parametrize("line, message", [
    (b"\xff", "line 7: not valid JSON"),
    (b"[1]", "line 7: not a JSON object"),
    (json.dumps({"url": CHAT, "body": {}}).encode(), "line 7: custom_id must be a non-empty string"),
    (json.dumps({**_request("x", CHAT), "method": "GET"}).encode(), "method must be POST"),
    (json.dumps(_request("x", "/v1/completions", prompt=[1, 2])).encode(), "body.prompt must be a non-empty string"),
    (json.dumps(_request("x", CHAT, messages=[{"role": "user"}])).encode(), "body.messages[1] needs a string content"),
])
def test_broken_lines_carry_their_reason(line: bytes, message: str) -> None:
    [row] = parse_line(line, 7).rows
    assert message in row["batch_error"]


def test_batch_job_exports_openai_output_lines(capsys, tmp_path: Path, batch_file: Path) -> None:
    run = ("run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch_file,
           "--output", tmp_path / "out")
    code, _, err = invoke(capsys, *run)
    assert code == 0, err
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "results.jsonl", "--format", "openai-batch")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == ["chat-1", "text-1", None, "image-1", "chat-2", "chat-3"]
    assert [line["response"]["status_code"] for line in lines] == [200, 200, 400, 400, 400, 400]
    chat = ChatCompletion.model_validate(lines[0]["response"]["body"])
    assert chat.choices[0].message.content == "42" and chat.model == "gpt-4o-mini"
    assert chat.usage.prompt_tokens == 7  # BOS + "12+30=": the chat template's BOS is not doubled
    text = Completion.model_validate(lines[1]["response"]["body"])
    assert len(text.choices) == 3 and text.usage.completion_tokens == sum(len(c.text) + 1 for c in text.choices)
    for line in lines[2:]:
        ErrorObject.model_validate(line["response"]["body"]["error"])
    assert "unsupported url '/v1/images/generations'" in lines[3]["response"]["body"]["error"]["message"]
    assert "temperature must be >= 0" in lines[5]["response"]["body"]["error"]["message"]
    code, _, err = invoke(capsys, *run)  # the same command again: the job is found complete, not changed
    assert code == 0 and "complete: 6 of 6 rows done" in err


def test_a_batch_job_exports_batch_lines_by_itself_and_its_table_when_asked(capsys, tmp_path: Path,
                                                                           batch_file: Path) -> None:
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch_file,
                          "--output", tmp_path / "out")
    assert code == 0, err
    assert "bulkinfer export" in err and "--format openai-batch" not in err  # the hint needs no --format now
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "lines.jsonl")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "lines.jsonl").read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == ["chat-1", "text-1", None, "image-1", "chat-2", "chat-3"]
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "table.jsonl", "--format", "rows")
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "table.jsonl").read_text().splitlines()]
    assert [row["custom_id"] for row in rows] == [line["custom_id"] for line in lines] and "generated_text" in rows[0]


@pytest.mark.parametrize("extra, message", [
    (["--format", "xml"], "format must be one of rows, openai-batch, got 'xml'"),
    (["--format", "openai-batch", "--prompt-column", "p"], "drop --prompt-column"),
    (["--format", "openai-batch", "--input", "second.jsonl"], "takes one --input: the batch file"),
])
def test_batch_mistakes_are_one_line(capsys, tmp_path: Path, batch_file: Path, extra: list[str], message: str) -> None:
    code, _, err = invoke(capsys, "run", "--model", DEMO_MODEL, "--input", batch_file, "--output", tmp_path / "o",
                          *extra)
    assert message in one_line_error(code, err)


def test_missing_batch_file_is_one_line(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL,
                          "--input", tmp_path / "none.jsonl", "--output", tmp_path / "o")
    assert "none.jsonl: no such batch file" in one_line_error(code, err)


def test_a_file_with_no_request_at_all_is_refused(capsys, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1="}\n\n{"prompt": "2+2="}\n')
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", rows,
                          "--output", tmp_path / "o")
    assert "no line is an OpenAI batch request (line 1: custom_id must be" in one_line_error(code, err)


def test_unwritable_output_is_one_line(capsys, batch_file: Path) -> None:
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch_file,
                          "--output", "/proc/no/such/place")
    assert "cannot create the output directory" in one_line_error(code, err)


def test_logprobs_come_back_in_the_apis_shapes(capsys, tmp_path: Path) -> None:
    batch = tmp_path / "logprobs.jsonl"
    batch.write_text("".join(json.dumps(r) + "\n" for r in [
        _request("chat", CHAT, messages=[{"role": "user", "content": "12+30="}], temperature=0, logprobs=True,
                 top_logprobs=2),
        _request("text", "/v1/completions", prompt="5+5=", temperature=0, logprobs=1),
        _request("none", "/v1/completions", prompt="5+6=", temperature=0),
    ]))
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch,
                          "--output", tmp_path / "out", "--max-tokens", "8")
    assert code == 0, err
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "r.jsonl", "--format", "openai-batch")
    bodies = [json.loads(line)["response"]["body"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    chat = ChatCompletion.model_validate(bodies[0]).choices[0].logprobs
    assert "".join(t.token for t in chat.content[:2]) == "42" and len(chat.content[0].top_logprobs) == 2
    text = Completion.model_validate(bodies[1]).choices[0].logprobs
    assert text.tokens[:2] == ["1", "0"] and all(len(top) == 1 for top in text.top_logprobs)
    assert Completion.model_validate(bodies[2]).choices[0].logprobs is None


SUM = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"], "additionalProperties": False}


def test_response_format_is_honoured(capsys, tmp_path: Path) -> None:
    ask = {"messages": [{"role": "user", "content": "12+30="}], "max_completion_tokens": 24, "temperature": 0}
    formats = [{"type": "json_schema", "json_schema": {"name": "sum", "schema": SUM, "strict": True}},
               {"type": "json_object"}, {"type": "text"}, {"type": "xml"},
               {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "strin"}}}]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(_request(f"r{i}", CHAT, **ask, response_format=f)) + "\n"
                             for i, f in enumerate(formats)))
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch,
                          "--output", tmp_path / "out")
    assert code == 0, err
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "results.jsonl", "--format", "openai-batch")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [line["response"]["status_code"] for line in lines] == [200, 200, 200, 400, 400]
    schema_content = ChatCompletion.model_validate(lines[0]["response"]["body"]).choices[0].message.content
    assert set(json.loads(schema_content)) == {"sum"}
    assert ChatCompletion.model_validate(lines[1]["response"]["body"]).choices[0].message.content.startswith("{")
    assert "unsupported response_format 'xml'" in lines[3]["response"]["body"]["error"]["message"]
    assert "unsupported schema: " in lines[4]["response"]["body"]["error"]["message"]


HOSTILE_BODIES = {  # a body's sampling field that the model cannot run with: that line's error, the rest run
    "seed": (dict(seed=2**80), "seed must be in [-2**63, 2**64 - 1]"),
    "temperature": (dict(temperature=float("nan")), "temperature must be a finite number, got nan"),
    "top_logprobs": (dict(logprobs=True, top_logprobs=10**6), "logprobs 1000000 is above the model's vocabulary"),
    "n": (dict(n=10**6), "n 1000000 is above max_n (128)"),
    "max_completion_tokens": (dict(max_completion_tokens=2**80), "max_tokens"),
    "top_k": (dict(top_k=2**80), None),  # above the vocabulary is the whole vocabulary: it runs
    "logit_bias": (dict(logit_bias={"99999999": 5}), "logit_bias token id 99999999 is outside the model's vocabulary"),
    "min_tokens": (dict(min_tokens=3), "min_tokens must be in [0, max_tokens (2)], got 3"),
    "bad_words": (dict(bad_words=["1"], logit_bias={"5": 100}, include_stop_str_in_output=True), None),
}


def test_a_hostile_body_field_is_its_own_lines_error(capsys, tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    bodies = [dict(max_completion_tokens=2), *(ask for ask, _ in HOSTILE_BODIES.values())]
    batch.write_text("".join(json.dumps(_request(f"r{i}", CHAT, messages=[{"role": "user", "content": "1+1="}],
                                                 **{"max_completion_tokens": 2, **ask})) + "\n"
                             for i, ask in enumerate(bodies)))
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch,
                          "--output", tmp_path / "out")
    assert code == 0, err
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "lines.jsonl")
    assert code == 0, err
    lines = [json.loads(line) for line in (tmp_path / "lines.jsonl").read_text().splitlines()]
    assert lines[0]["response"]["status_code"] == 200
    for line, (_, message) in zip(lines[1:], HOSTILE_BODIES.values()):
        if message is None:
            assert line["response"]["status_code"] == 200
        else:
            assert message in line["response"]["body"]["error"]["message"], line


def test_the_request_table_stays_in_the_output_directory(capsys, tmp_path: Path, batch_file: Path,
                                                         monkeypatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # a relative --output: nothing but it may appear here
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch_file,
                          "--output", "out")
    assert code == 0, err
    assert os.listdir(work) == ["out"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch_file,
                          "--output", mine)
    assert "holds no bulkinfer job" in one_line_error(code, err)
    assert os.listdir(mine) == ["notes.txt"]
