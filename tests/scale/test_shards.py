"""Job arrays: N shards of one job run at once into one directory; status and export see the union."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bulkinfer.cli import main
from bulkinfer.runner import JobConfig, UsageError, export_job, job_status, run_job
from bulkinfer.runner.shards import Shard, shard_of
from runner_files import prompts, read_results, write_jsonl, write_parquet

SETTINGS = dict(dtype="float32", max_tokens=4, temperature=0.0, max_num_seqs=8, window_rows=8, shard_rows=5)
CLI = [sys.executable, "-c", "from bulkinfer.cli import main; main()"]


@pytest.fixture
def data(tmp_path: Path) -> list[Path]:
    """Two files, so shard blocks cross a file boundary."""
    rows = prompts(31)
    return [write_jsonl(tmp_path / "a.jsonl", rows[:13]), write_parquet(tmp_path / "b.parquet", rows[13:])]


def _config(model: Path, data: list[Path], out: Path, **extra) -> JobConfig:
    return JobConfig.from_settings(model=str(model), input=[str(path) for path in data], output=str(out),
                                   **SETTINGS, **extra)


def _flags(model: Path, data: list[Path], out: Path) -> list[str]:
    flags = ["run", "--model", str(model), "--output", str(out)]
    flags += [part for path in data for part in ("--input", str(path))]
    return flags + [part for name, value in SETTINGS.items() for part in ("--" + name.replace("_", "-"), str(value))]


def _exported(out: Path, tmp_path: Path, **options) -> list[dict]:
    destination = tmp_path / f"{out.name}.parquet"
    export_job(out, destination, **options)
    return read_results(destination)


@pytest.mark.parametrize("rows_total, count", [(31, 3), (2, 3), (0, 2), (10, 1)])
def test_parts_split_the_rows_into_disjoint_blocks(rows_total: int, count: int) -> None:
    blocks = [Shard(index, count).rows(rows_total) for index in range(count)]
    assert [row for block in blocks for row in block] == list(range(rows_total))


@pytest.mark.parametrize("environ, flags, expected", [
    ({}, {}, Shard(0, 1)),
    ({}, {"shard": 2, "num_shards": 4}, Shard(2, 4)),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}, {}, Shard(3, 4)),
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, {}, Shard(3, 4)),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}, {"shard": 0, "num_shards": 2}, Shard(0, 2)),
    ({"JOB_COMPLETION_INDEX": "1"}, {"num_shards": 3}, Shard(1, 3)),
    ({"JOB_COMPLETION_INDEX": "1", "BULKINFER_NUM_SHARDS": "2"}, {}, Shard(1, 2)),
])
def test_the_shard_comes_from_flags_or_the_scheduler(tmp_path: Path, environ: dict, flags: dict,
                                                     expected: Shard) -> None:
    config = JobConfig.from_settings(model="m", input=["x"], output=str(tmp_path), **flags)
    assert shard_of(config, environ) == expected


@pytest.mark.parametrize("environ, flags, message", [
    ({}, {"num_shards": 3}, "--num-shards 3 needs --shard I"),
    ({}, {"shard": 1}, "shard 1 given without the number of shards"),
    ({"JOB_COMPLETION_INDEX": "1"}, {}, "shard 1 given without the number of shards"),
    ({}, {"shard": 3, "num_shards": 3}, "the shard must be in 0..2"),
    ({"SLURM_ARRAY_TASK_ID": "x"}, {}, "SLURM_ARRAY_TASK_ID='x' is not a whole number"),
])
def test_bad_shard_settings_are_usage_errors(tmp_path: Path, environ: dict, flags: dict, message: str) -> None:
    config = JobConfig.from_settings(model="m", input=["x"], output=str(tmp_path), **flags)
    with pytest.raises(UsageError, match=message):
        shard_of(config, environ)


@pytest.mark.slow
def test_concurrent_shards_add_up_to_a_plain_run(tmp_path: Path, tiny_llama: Path, data: list[Path]) -> None:
    run_job(_config(tiny_llama, data, tmp_path / "plain"))
    out = tmp_path / "sharded"
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "JOB_COMPLETION"))}
    base = _flags(tiny_llama, data, out)
    children = [  # shard 1 finds its index the way a Slurm array task does
        subprocess.Popen(CLI + base + ["--num-shards", "3", "--shard", "0"], env=clean),
        subprocess.Popen(CLI + base, env={**clean, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}),
        subprocess.Popen(CLI + base + ["--num-shards", "3"], env={**clean, "JOB_COMPLETION_INDEX": "2"}),
    ]
    assert [child.wait(timeout=300) for child in children] == [0, 0, 0]
    assert sorted(path.name for path in out.glob("ledger*")) == [f"ledger-{i}-of-3.jsonl" for i in range(3)]
    status = job_status(out)
    assert (status.state, status.rows_done, status.missing_shards, status.unfinished_shards) == ("complete", 31, [], [])
    assert _exported(out, tmp_path) == _exported(tmp_path / "plain", tmp_path)


def test_missing_and_unfinished_shards_are_named(tmp_path: Path, tiny_llama: Path, data: list[Path],
                                                 capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    for shard in (0, 2):
        assert run_job(_config(tiny_llama, data, out, num_shards=3, shard=shard)).complete
    status = job_status(out)
    assert (status.state, status.rows_done, status.missing_shards) == ("interrupted", 21, [1])
    assert status.to_json()["missing_shards"] == [1]
    with pytest.raises(UsageError, match=r"21 of 31 rows; shards never started: 1\)"):
        export_job(out, tmp_path / "x.parquet")
    assert sorted(row["row_index"] for row in _exported(out, tmp_path, partial=True)) == [*range(10), *range(20, 31)]

    (out / "ledger-2-of-3.jsonl").write_bytes(b"")  # as if shard 2 had only just started
    status = job_status(out)
    assert (status.rows_done, status.missing_shards, status.unfinished_shards) == (10, [1], [2])
    with pytest.raises(SystemExit):
        main(["status", str(out)])
    assert "shards never started: 1; shards unfinished: 2" in capsys.readouterr().out


def test_each_shard_resumes_on_its_own(tmp_path: Path, tiny_llama: Path, data: list[Path]) -> None:
    out = tmp_path / "out"
    run_job(_config(tiny_llama, data, out, num_shards=2, shard=0))
    again = run_job(_config(tiny_llama, data, out, num_shards=2, shard=0))
    assert (again.rows_total, again.rows_at_start, again.complete) == (15, 15, True)
    other = run_job(_config(tiny_llama, data, out, num_shards=2, shard=1))
    assert (other.rows_total, other.rows_at_start, other.complete) == (16, 0, True)
    assert job_status(out).state == "complete"


@pytest.mark.parametrize("first, second, message", [
    (dict(num_shards=2, shard=0), dict(num_shards=3, shard=1), "split into 2 shard"),
    (dict(num_shards=2, shard=0), {}, "split into 2 shard"),
    ({}, dict(num_shards=2, shard=1), "split into 1 shard"),
    (dict(num_shards=2, shard=0), dict(num_shards=2, shard=1, max_tokens=3), "shard 0 of 2 is a different job"),
])
def test_shards_of_different_jobs_do_not_mix(tmp_path: Path, tiny_llama: Path, data: list[Path],
                                             first: dict, second: dict, message: str) -> None:
    out = tmp_path / "out"
    run_job(_config(tiny_llama, data, out, **first))
    settings = {**SETTINGS, **second}
    with pytest.raises(UsageError, match=message):
        run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(path) for path in data], output=str(out),
                                        **settings))


def test_the_manifest_names_its_shard(tmp_path: Path, tiny_llama: Path, data: list[Path]) -> None:
    run_job(_config(tiny_llama, data, tmp_path / "out", num_shards=2, shard=1))
    manifest = json.loads((tmp_path / "out" / "job-1-of-2.json").read_text())
    assert (manifest["shard"], manifest["num_shards"], manifest["rows_total"]) == (1, 2, 31)
