"""Torture: 20 kill -9s at random moments, 50 byte flips and random cuts of result files, and a disk
error at every write and fsync of a commit. Every time: 0 rows lost, 0 duplicated, 0 silent changes
(an export is either refused or equal to the uninterrupted run's), and the next run repairs."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from runner_files import committed, prompts, read_results, write_jsonl
from subprocess_job import SETTINGS, assert_consistent, commits, start, wait_for

from bulkinfer.errors import RunError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

pytestmark = pytest.mark.slow  # a hundred runs and exports

ROWS = 160


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rows = prompts(ROWS - 2) + ["{oops", {"prompt": ""}]
    random.Random(3).shuffle(rows)
    return write_jsonl(tmp_path_factory.mktemp("torture") / "in.jsonl", rows)


def _config(model: Path, data: Path, out: Path) -> JobConfig:
    return JobConfig.from_settings(model=str(model), input=[str(data)], output=str(out), **SETTINGS)


@pytest.fixture(scope="module")
def finished(data: Path, tiny_llama: Path, tmp_path_factory) -> tuple[Path, list[dict]]:
    """An uninterrupted run, and its export."""
    out = tmp_path_factory.mktemp("finished") / "out"
    assert run_job(_config(tiny_llama, data, out)).complete
    return out, _exported(out, out.parent / "baseline.parquet")


def _exported(out: Path, destination: Path) -> list[dict]:
    export_job(out, destination)
    return read_results(destination)


def _exported_or_refused(out: Path, destination: Path) -> list[dict] | None:
    try:
        return _exported(out, destination)
    except RunError:
        return None


def test_twenty_kills_at_random_moments(tmp_path: Path, tiny_llama: Path, data: Path, finished) -> None:
    _, baseline = finished
    out, generator, kills = tmp_path / "out", random.Random(11), 0
    while kills < 20:
        process = start(tiny_llama, data, out)
        before = commits(out)
        if not wait_for(lambda: commits(out) > before, process):
            process.communicate(timeout=300)
            assert process.returncode == 0
            out = tmp_path / f"out-{kills}"  # finished before it was killed: go on with a new job
            continue
        try:
            process.wait(timeout=generator.uniform(0.0, 0.4))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.communicate(timeout=300)
        assert_consistent(out)
    assert run_job(_config(tiny_llama, data, out)).complete
    assert _exported(out, tmp_path / "after-kills.parquet") == baseline


@pytest.mark.parametrize("damage", ["flip", "cut"])
def test_damaged_result_files_are_never_exported_and_are_repaired(tmp_path: Path, tiny_llama: Path, data: Path,
                                                                  finished, damage: str) -> None:
    source, baseline = finished
    generator = random.Random(5 if damage == "flip" else 6)
    silent, refused = 0, 0
    for trial in range(50 if damage == "flip" else 20):
        out = tmp_path / f"out-{trial}"
        shutil.copytree(source, out)
        commit = generator.choice(committed(out / "ledger.jsonl"))
        path = out / "shards" / commit.file
        data_bytes = path.read_bytes()
        offset = generator.randrange(len(data_bytes))
        if damage == "flip":
            path.write_bytes(data_bytes[:offset] + bytes([data_bytes[offset] ^ (1 << generator.randrange(8))])
                             + data_bytes[offset + 1:])
        else:
            path.write_bytes(data_bytes[:offset])
        rows = _exported_or_refused(out, tmp_path / f"export-{trial}.parquet")
        refused += rows is None
        silent += rows is not None and rows != baseline
        if trial % 10 == 0:  # the repair: a run redoes exactly the damaged file's rows
            outcome = run_job(_config(tiny_llama, data, out))
            assert outcome.complete and outcome.rows_done - outcome.rows_at_start == commit.rows
            assert _exported(out, tmp_path / f"repaired-{trial}.parquet") == baseline
        shutil.rmtree(out)
    assert silent == 0 and refused == (50 if damage == "flip" else 20)


@pytest.mark.parametrize("point", ["file-write-enospc", "file-fsync-eio", "ledger-write-enospc", "ledger-fsync-eio"])
def test_a_disk_error_at_every_write_and_fsync(tmp_path: Path, tiny_llama: Path, data: Path, finished,
                                              point: str) -> None:
    _, baseline = finished
    out = tmp_path / "out"
    failing = start(tiny_llama, data, out, point, nth=3)  # test_disk_errors.py fails the second commit
    _, err = failing.communicate(timeout=300)
    assert failing.returncode == 1 and "nothing committed is lost" in err, err
    assert_consistent(out)
    assert run_job(_config(tiny_llama, data, out)).complete
    assert_consistent(out)
    assert _exported(out, tmp_path / "after.parquet") == baseline
