"""Damaged results are never exported silently: a cut, altered or missing result file is found by
status, refused by export with one line naming it, and redone by the next run, which then equals an
uninterrupted run. A missing or edited job.json is still checked against the ledger's job record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from runner_files import committed, prompts, read_results, write_jsonl

from bulkinfer.cli import main
from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.status import job_status

SETTINGS = dict(dtype="float32", max_tokens=3, temperature=0.0, max_num_seqs=8, window_rows=10, shard_rows=10,
                commit_seconds=60)


def _config(tmp_path: Path, model: Path, out: str = "out", **settings) -> JobConfig:
    return JobConfig.from_settings(model=str(model), input=[str(tmp_path / "in.jsonl")], output=str(tmp_path / out),
                                   **{**SETTINGS, **settings})


@pytest.fixture
def finished(tmp_path: Path, tiny_llama: Path) -> tuple[Path, list[dict]]:
    """A finished 40-row job in four result files, and its export."""
    write_jsonl(tmp_path / "in.jsonl", prompts(40))
    for fmt in ("jsonl", "parquet"):
        assert run_job(_config(tmp_path, tiny_llama, f"out-{fmt}", output_format=fmt)).complete
    expected = _export(tmp_path / "out-parquet", tmp_path / "expected.parquet")
    return tmp_path, expected


def _export(out: Path, destination: Path) -> list[dict]:
    export_job(out, destination)
    return read_results(destination)


def _files(out: Path) -> list[tuple[Path, int]]:
    """Each committed file with its number of rows."""
    return [(out / "shards" / commit.file, commit.rows) for commit in committed(out / "ledger.jsonl")]


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "cut":  # the last 3 lines of a JSONL file, or the tail of a Parquet file
        kept = b"".join(data.splitlines(keepends=True)[:-3]) if path.suffix == ".jsonl" else data[:-40]
        path.write_bytes(kept)
    elif how == "flip":  # one bit in the middle
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1:])
    else:
        path.unlink()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("how", ["cut", "flip", "missing"])
def test_a_damaged_file_is_refused_then_redone(finished, tiny_llama: Path, fmt: str, how: str) -> None:
    tmp_path, expected = finished
    out = tmp_path / f"out-{fmt}"
    damaged, rows = _files(out)[1]
    _damage(damaged, how)
    status = job_status(out, verify=True)
    assert status.state == "damaged" and status.rows_done == 40 - rows and str(damaged) in status.damaged[0]
    with pytest.raises(RunError, match=f"^{damaged}: .*damaged results are not exported"):
        export_job(out, tmp_path / "x.parquet")
    assert not list(tmp_path.glob(".tmp-*")) and not (tmp_path / "x.parquet").exists()
    outcome = run_job(_config(tmp_path, tiny_llama, out.name, output_format=fmt))
    assert outcome.complete and outcome.rows_done - outcome.rows_at_start == rows  # exactly the damaged file's
    assert job_status(out, verify=True).state == "complete"
    assert _export(out, tmp_path / "again.parquet") == expected


def test_status_without_verify_finds_a_cut_file_by_its_size(finished, capsys) -> None:
    tmp_path, _ = finished
    out = tmp_path / "out-jsonl"
    damaged, rows = _files(out)[0]
    _damage(damaged, "cut")
    with pytest.raises(SystemExit) as exited:
        main(["status", str(out)])
    printed = capsys.readouterr().out
    assert exited.value.code == 1 and printed.startswith(f"damaged: {40 - rows} of 40 rows done")
    assert "bytes where" in printed and "run the job again" in printed


def test_status_verify_says_a_sound_job_is_sound(finished, capsys) -> None:
    tmp_path, _ = finished
    with pytest.raises(SystemExit) as exited:
        main(["status", str(tmp_path / "out-parquet"), "--verify"])
    assert exited.value.code == 0 and "every result file is as committed" in capsys.readouterr().out


def test_a_removed_results_folder_is_redone(finished, tiny_llama: Path) -> None:
    tmp_path, expected = finished
    out = tmp_path / "out-parquet"
    shutil.rmtree(out / "shards")
    assert job_status(out).rows_done == 0
    assert run_job(_config(tmp_path, tiny_llama, out.name, output_format="parquet")).complete
    assert _export(out, tmp_path / "again.parquet") == expected


@pytest.mark.parametrize("edit", ["delete", "edit"])
def test_job_json_gone_or_edited_does_not_hide_a_different_job(finished, tiny_llama: Path, edit: str) -> None:
    tmp_path, expected = finished
    out = tmp_path / "out-parquet"
    manifest = out / "job.json"
    if edit == "delete":
        manifest.unlink()
    else:
        text = json.loads(manifest.read_text())
        text["fingerprint"]["max_tokens"] = 2
        manifest.write_text(json.dumps(text))
    with pytest.raises(UsageError, match="holds a different job .*max_tokens 3 -> 2"):
        run_job(_config(tmp_path, tiny_llama, out.name, max_tokens=2))
    again = run_job(_config(tmp_path, tiny_llama, out.name))  # the same job: resumes, and job.json is restored
    assert again.complete and again.rows_at_start == 40
    assert json.loads(manifest.read_text())["fingerprint"]["max_tokens"] == 3
    assert _export(out, tmp_path / "again.parquet") == expected
