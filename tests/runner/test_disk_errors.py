"""A full disk or an I/O error at any write or fsync of a commit stops the job with one line and exit 1,
loses nothing committed, and the rerun completes with the results of an uninterrupted run. One disk
fills up for real: a small tmpfs."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_disk import mounted_tmpfs
from runner_files import prompts, read_results, write_jsonl
from subprocess_job import SETTINGS, assert_consistent, commits, start

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

pytestmark = pytest.mark.slow  # a job process per disk error, then its rerun

ROWS = 60


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("disk") / "in.jsonl", prompts(ROWS))


@pytest.fixture(scope="module")
def baseline(data: Path, tiny_llama: Path, tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("baseline")
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(root / "out"), **SETTINGS))
    return _exported(root / "out")


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


@pytest.mark.parametrize("point, said", [
    ("file-write-enospc", "disk full writing {out}/shards/shard-000002.parquet: nothing committed is lost; "
                          "free space and rerun"),
    ("file-fsync-eio", "Input/output error writing {out}/shards/shard-000002.parquet: nothing committed is lost; "
                       "check the disk and rerun"),
    ("ledger-write-enospc", "disk full writing {out}/ledger.jsonl: nothing committed is lost; free space and rerun"),
    ("ledger-fsync-eio", "Input/output error writing {out}/ledger.jsonl: nothing committed is lost; "
                         "check the disk and rerun"),
])
def test_a_disk_error_stops_with_one_line_and_the_rerun_completes(tmp_path: Path, data: Path, tiny_llama: Path,
                                                                  baseline: list[dict], point: str, said: str):
    out = tmp_path / "out"
    process = start(tiny_llama, data, out, point, nth=2)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1, err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert errors == [f"bulkinfer: error: {said.format(out=out)}"], err
    assert "Traceback" not in err
    assert_consistent(out)
    assert commits(out) in (1, 2)  # the first commit, and the second if its ledger line got through
    again = start(tiny_llama, data, out)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert_consistent(out)
    assert _exported(out) == baseline


FINE_COMMITS = ("--shard-rows", "1", "--max-num-seqs", "2")  # about 30 commits: the ledger outgrows its first page


@pytest.fixture
def tiny_disk(tmp_path: Path):
    with mounted_tmpfs(tmp_path, "4m") as mount:
        yield mount


def test_a_really_full_disk_at_the_ledger_append_is_one_line(tiny_disk: Path, data: Path, tiny_llama: Path,
                                                             baseline: list[dict]) -> None:
    out = tiny_disk / "out"
    process = start(tiny_llama, data, out, "ledger-disk-full", extra=FINE_COMMITS)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 1, err
    assert [line for line in err.splitlines() if "error:" in line] == [
        f"bulkinfer: error: disk full writing {out}/ledger.jsonl: nothing committed is lost; free space and rerun"]
    assert "Traceback" not in err and commits(out) > 3
    assert_consistent(out)
    (tiny_disk / "filler").unlink()
    again = start(tiny_llama, data, out, extra=FINE_COMMITS)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert_consistent(out)
    assert _exported(out) == baseline
