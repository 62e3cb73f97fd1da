"""An input file that changes while its job runs (appended, cut, rewritten, replaced, deleted) stops the
run before its next commit, with one line; nothing past the file's recorded rows is ever committed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest
from runner_files import prompts, read_results, write_jsonl, write_parquet
from subprocess_job import commits, start

from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.outdir import ledger
from bulkinfer.runner.outdir.ledger import load_progress
from bulkinfer.runner.status import job_status

ROWS = 24
FAST = dict(dtype="float32", max_tokens=3, temperature=0.0, max_num_seqs=4, window_rows=4, shard_rows=4,
            commit_seconds=60.0)


def _config(model: Path, data: Path, out: Path) -> JobConfig:
    return JobConfig.from_settings(model=str(model), input=[str(data)], output=str(out), **FAST)


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


@pytest.fixture(scope="module")
def baseline(tiny_llama: Path, tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("baseline")
    data = write_jsonl(root / "in.jsonl", prompts(ROWS))
    run_job(_config(tiny_llama, data, root / "out"))
    return _exported(root / "out")


def _after_first_commit(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Call `change` once, right after the run's first ledger line is written: between two commits."""
    append = ledger.Ledger.append
    changed = []

    def append_then_change(self, record):
        append(self, record)
        if not changed:
            changed.append(True)
            change()

    monkeypatch.setattr(ledger.Ledger, "append", append_then_change)


def _committed_rows(out: Path) -> list[int]:
    return [row for commit in load_progress(out / "ledger.jsonl").files for row in commit.row_ids()]


def _append(path: Path) -> None:
    with open(path, "a") as handle:
        handle.write("".join(f'{{"prompt": "extra {i}", "k": {1000 + i}}}\n' for i in range(ROWS)))


def _cut(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _rewrite(path: Path) -> None:
    write_jsonl(path, [{**row, "prompt": row["prompt"].upper()} for row in prompts(ROWS)])


def _replace_by_rename(path: Path) -> None:
    other = write_jsonl(path.with_name("new.jsonl"), prompts(ROWS)[::-1])
    os.replace(other, path)


@pytest.mark.parametrize("change, said", [
    (_append, "grew"), (_cut, "shrank"), (_rewrite, "was modified"), (_replace_by_rename, "was modified"),
    (Path.unlink, "was deleted"),
])
def test_a_jsonl_input_changed_mid_run_stops_it_and_nothing_past_its_end_is_committed(
        tmp_path: Path, tiny_llama: Path, baseline: list[dict], monkeypatch: pytest.MonkeyPatch,
        change, said: str) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", prompts(ROWS))
    original = data.read_bytes()
    out = tmp_path / "out"
    _after_first_commit(monkeypatch, lambda: change(data))
    with pytest.raises(RunError) as raised:
        run_job(_config(tiny_llama, data, out))
    message = str(raised.value)
    assert f"{data}: {said}" in message and "\n" not in message
    assert "Put the file back as it was" in message and "--force" in message
    progress = load_progress(out / "ledger.jsonl")
    assert len(progress.files) == 1  # the commit before the change, and none after
    assert max(_committed_rows(out)) < ROWS
    assert job_status(out, verify=True).state == "interrupted"
    monkeypatch.undo()
    with pytest.raises(UsageError) as refused:  # resuming on the changed file: refused before the model loads
        run_job(_config(tiny_llama, data, out))
    assert "\n" not in str(refused.value) and ("--force" in str(refused.value) or said == "was deleted")
    data.write_bytes(original)
    recorded = json.loads((out / "job.json").read_text())["inputs"][0]["mtime_ns"]
    os.utime(data, ns=(recorded, recorded))  # as a restore from a backup that keeps times would
    outcome = run_job(_config(tiny_llama, data, out))
    assert (outcome.rows_done, outcome.rows_total) == (ROWS, ROWS)
    assert _exported(out) == baseline


def test_a_parquet_input_replaced_mid_run_stops_it(tmp_path: Path, tiny_llama: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_parquet(tmp_path / "in.parquet", prompts(ROWS), row_group_size=4)
    out = tmp_path / "out"
    _after_first_commit(monkeypatch, lambda: write_parquet(data, prompts(2 * ROWS), row_group_size=4))
    with pytest.raises(RunError, match=f"{data}: grew"):
        run_job(_config(tiny_llama, data, out))
    assert max(_committed_rows(out)) < ROWS


def test_the_command_line_says_it_in_one_line_and_exits_1(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", prompts(ROWS))
    out, size = tmp_path / "out", data.stat().st_size
    process = start(tiny_llama, data, out, "input-grows", nth=1)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1, err
    assert [line for line in err.splitlines() if "error" in line] == [
        f"bulkinfer: error: {data}: grew from {size:,} to {data.stat().st_size:,} bytes since the "
        f"job started; this run stops without committing more (what it committed is kept). Put the file back as "
        f"it was, bytes and modification time (as cp -p restores them), to go on; or rerun with --force or "
        f"another --output to start over with the new data"], err
    assert commits(out) == 1
