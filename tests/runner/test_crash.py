"""Crash torture: SIGKILL the runner at random moments and at the worst exact points, resume until it
finishes, and check that every row is there exactly once with the results of an uninterrupted run."""

import random
import signal
from pathlib import Path

import pytest
from runner_files import prompts, read_results, write_jsonl
from subprocess_job import SETTINGS, assert_consistent, commits, killed_and_resumed, start

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.outdir.ledger import load_progress

pytestmark = pytest.mark.slow  # processes killed with SIGKILL, then resumed, many times

ROWS = 128


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rows = prompts(ROWS - 3) + ["{oops", {"prompt": ""}, {"prompt": None}]
    random.Random(7).shuffle(rows)
    return write_jsonl(tmp_path_factory.mktemp("crash") / "in.jsonl", rows)


@pytest.fixture(scope="module")
def baseline(data: Path, tiny_llama: Path, tmp_path_factory) -> list[dict]:
    """The uninterrupted run, in this process, with the same settings as the children."""
    root = tmp_path_factory.mktemp("baseline")
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(root / "out"), **SETTINGS))
    return _exported(root / "out")


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


def _finish(model: Path, data: Path, out: Path) -> None:
    process = start(model, data, out)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err


def _assert_same_as_baseline(out: Path, baseline: list[dict]) -> None:
    shards = {path.name for path in (out / "shards").iterdir()}
    assert_consistent(out)
    assert len(shards) == commits(out)  # no orphan or temporary file survives a resumed run
    rows = _exported(out)
    assert [row["row_index"] for row in rows] == list(range(ROWS))
    assert rows == baseline


def test_sigkill_at_random_moments(tmp_path: Path, data: Path, tiny_llama: Path, baseline: list[dict]) -> None:
    out = tmp_path / "out"
    killed_and_resumed(tiny_llama, data, out, (), seed=1, kills=(2, 3), longest_wait=0.5)
    _assert_same_as_baseline(out, baseline)


def test_sigkill_at_the_worst_points_of_a_commit(tmp_path: Path, data: Path, tiny_llama: Path,
                                                 baseline: list[dict]) -> None:
    out = tmp_path / "out"
    for point in ("shard-write", "before-ledger", "ledger-write"):
        process = start(tiny_llama, data, out, point, nth=2)
        process.communicate(timeout=300)
        assert process.returncode == -signal.SIGKILL, point
        assert_consistent(out)
        leftovers = {path.name for path in (out / "shards").iterdir()}
        unlisted = leftovers - {commit.file for commit in load_progress(out / "ledger.jsonl").files}
        if point == "shard-write":
            assert any(name.endswith(".tmp") for name in unlisted)
        else:  # the shard is in place but the ledger does not (fully) list it
            assert any(name.endswith(".parquet") for name in unlisted)
        torn = not (out / "ledger.jsonl").read_bytes().endswith(b"\n")
        assert torn == (point == "ledger-write")
    _finish(tiny_llama, data, out)
    _assert_same_as_baseline(out, baseline)
