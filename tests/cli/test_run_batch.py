"""`bulkinfer run-batch -i INPUT -o OUTPUT --model M`: one command, OpenAI's output and error files, resumable."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import DEMO_MODEL, invoke
from openai.types.chat import ChatCompletion

CHAT = "/v1/chat/completions"
REQUEST_ID = re.compile(r"[0-9a-f]{32}")


def _chat(custom_id: str, content: str, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": CHAT,
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": content}],
                     "max_completion_tokens": 8, "temperature": 0, **body}}


def _write_batch(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(request) + "\n" for request in requests))
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ids(lines: list[dict[str, Any]]) -> dict[str, str]:
    return {line["custom_id"]: line["id"] for line in lines}


def test_run_batch_writes_responses_and_failed_requests_apart(capsys, tmp_path: Path, monkeypatch) -> None:
    batch = _write_batch(tmp_path / "batch.jsonl", [
        _chat("sum-1", "12+30="), _chat("nan", "1+1=", temperature=float("nan")), _chat("sum-2", "1+1="),
        {"custom_id": "image", "method": "POST", "url": "/v1/images/generations", "body": {"prompt": "x"}}])
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # OUTPUT relative: the job's state must sit beside it, and nothing else appear
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", "out.jsonl", "--model", DEMO_MODEL)
    assert code == 0, err
    assert sorted(os.listdir(work)) == [".out.jsonl.bulkinfer", "out.errors.jsonl", "out.jsonl"]
    answers, failures = _lines(work / "out.jsonl"), _lines(work / "out.errors.jsonl")
    assert [line["custom_id"] for line in answers] == ["sum-1", "sum-2"]
    assert [line["custom_id"] for line in failures] == ["nan", "image"]
    assert ChatCompletion.model_validate(answers[0]["response"]["body"]).choices[0].message.content == "42"
    assert "temperature must be a finite number" in failures[0]["response"]["body"]["error"]["message"]
    assert all(line["response"]["status_code"] == 400 for line in failures)
    hex_ids = [line["id"].removeprefix("batch_req_") for line in answers + failures]
    assert all(REQUEST_ID.fullmatch(hex_id) for hex_id in hex_ids) and len(set(hex_ids)) == 4
    assert answers[0]["response"]["request_id"] == f"req_{hex_ids[0]}"
    assert answers[0]["response"]["body"]["id"] == f"chatcmpl-{hex_ids[0]}"


def test_ids_differ_between_batches_and_hold_on_a_rerun(capsys, tmp_path: Path) -> None:
    batch = _write_batch(tmp_path / "batch.jsonl", [_chat("a", "1+1=", max_completion_tokens=2), _chat("b", "2+2=")])
    ids = []
    for name in ("first.jsonl", "second.jsonl", "first.jsonl"):
        code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / name, "--model", DEMO_MODEL)
        assert code == 0, err
        ids.append(_ids(_lines(tmp_path / name)))
    assert ids[0] == ids[2]  # the same job, found complete and written again
    assert not set(ids[0].values()) & set(ids[1].values())  # merged batches do not collide


def test_run_batch_mistakes_are_one_line(capsys, tmp_path: Path) -> None:
    batch = _write_batch(tmp_path / "batch.jsonl", [_chat("a", "1+1=")])
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "out.jsonl")
    assert code == 2 and err == "bulkinfer: error: missing --model: the model directory or hub id to run the " \
                                "batch with\n"
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "no" / "out.jsonl", "--model", DEMO_MODEL)
    assert code == 2 and err == f"bulkinfer: error: {tmp_path / 'no'}: no such directory\n"
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", batch, "--model", DEMO_MODEL)
    assert code == 2 and "is the input file" in err and err.count("\n") == 1
    code, _, err = invoke(capsys, "run-batch", "-i", tmp_path / "none.jsonl", "-o", tmp_path / "out.jsonl",
                          "--model", DEMO_MODEL)
    assert code == 2 and err == f"bulkinfer: error: {tmp_path / 'none.jsonl'}: no such batch file\n"
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "out.jsonl", "--model", tmp_path / "nm")
    assert code == 2 and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["batch.jsonl"]  # no job state left behind by a refused start


@pytest.mark.slow
def test_killed_run_batch_resumes_with_the_same_ids(capsys, tmp_path: Path) -> None:
    requests = [_chat(f"r{i}", f"{i}+{i}=", ignore_eos=True) for i in range(24)]
    batch, output = _write_batch(tmp_path / "batch.jsonl", requests), tmp_path / "out.jsonl"
    command = ["-i", str(batch), "-o", str(output), "--model", str(DEMO_MODEL), "--shard-rows", "2",
               "--max-num-seqs", "2"]
    job = tmp_path / ".out.jsonl.bulkinfer"
    process = subprocess.Popen([sys.executable, "-m", "bulkinfer", "run-batch", *command], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_commits(job / "ledger.jsonl", process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not output.exists()
    code, _, err = invoke(capsys, "export", job, tmp_path / "partial.jsonl", "--partial")
    assert code == 0, err
    before = _ids(_lines(tmp_path / "partial.jsonl"))
    assert 0 < len(before) < len(requests)
    code, _, err = invoke(capsys, "run-batch", *command)
    assert code == 0, err
    lines = _lines(output)
    assert [line["custom_id"] for line in lines] == [f"r{i}" for i in range(24)]
    after = _ids(lines)
    assert {custom_id: after[custom_id] for custom_id in before} == before
    assert len(set(after.values())) == len(requests)
    assert _lines(tmp_path / "out.errors.jsonl") == []


def _wait_for_commits(ledger: Path, process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the running job has committed some rows (and, on a quick machine, not all of them)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if ledger.is_file() and '"commit"' in ledger.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"no rows committed in {timeout} s (exit status {process.poll()})")


def test_run_batch_help_imports_no_torch() -> None:
    probe = ("import sys\nfrom bulkinfer.cli import main\ntry:\n    main(['run-batch', '--help'])\n"
             "except SystemExit as exit:\n    assert exit.code == 0, exit.code\n"
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "[]", result.stderr
