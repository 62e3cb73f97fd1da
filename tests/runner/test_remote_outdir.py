"""An output directory on object storage (s3://), against a real S3-protocol server on localhost:
the same guarantees as on disk (every row committed once, verified, resumable), kept by conditional
creates instead of renames and a lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_files import prompts, read_results, write_jsonl
from subprocess_job import commits, killed_and_resumed, start, wait_for

from bulkinfer.cli import main
from bulkinfer.runner.outdir.commit import Committer
from bulkinfer.runner.outdir.layout import new_manifest
from bulkinfer.runner.outdir.remote_layout import RemoteJobDir
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.shards import WHOLE

ROWS = 24
RUN = ("--max-tokens", "3", "--temperature", "0", "--shard-rows", "5", "--max-num-seqs", "4")


def _main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("remote") / "in.jsonl", prompts(ROWS))


def _run(capsys, model: Path, data: Path, out: str, *extra: str) -> tuple[int, str, str]:
    return _main(capsys, "run", "--model", str(model), "--input", str(data), "--output", out, *RUN, *extra)


def _exported(capsys, out: str, destination: Path) -> list[dict]:
    code, _, err = _main(capsys, "export", out, str(destination))
    assert code == 0, err
    return read_results(destination)


def test_run_status_export_on_s3(capsys, s3_server, tmp_path: Path, tiny_llama: Path, data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out/")
    code, _, err = _run(capsys, tiny_llama, data, out)
    assert code == 0 and f"complete: {ROWS} of {ROWS} rows done" in err, err
    code, printed, _ = _main(capsys, "status", out, "--json")
    assert code == 0 and json.loads(printed)["state"] == "complete"
    remote = _exported(capsys, out, tmp_path / "remote.jsonl")
    local_out = tmp_path / "local"
    assert _run(capsys, tiny_llama, data, str(local_out))[0] == 0
    assert remote == _exported(capsys, str(local_out), tmp_path / "local.jsonl")
    directory = RemoteJobDir(out)
    assert json.loads(directory.fs.cat_file(f"{directory.root}/stats.json"))["rows_done"] == ROWS
    _assert_entries_once(directory, ROWS)


def _assert_entries_once(directory: RemoteJobDir, rows: int) -> None:
    """The ledger's entries are numbered 1..N without a gap, each commit under its own number, and the live
    commits hold every row once."""
    names = sorted(path.rsplit("/", 1)[1] for path in directory.fs.ls(directory.ledger_path, detail=False))
    assert names == [f"{number:06d}.json" for number in range(1, len(names) + 1)]
    progress = directory.load_progress()
    assert all(number == commit.seq for number, commit in progress.commits.items())
    assert sorted(row for commit in progress.files for row in commit.row_ids()) == list(range(rows))


def _row(index: int) -> dict:
    return {"row_index": index, "generated_text": f"text {index}", "error": None}


def _committer(directory: RemoteJobDir, job: dict) -> Committer:
    """A run's committer on the job, knowing the entries there now."""
    progress, done = directory.load_progress(), RowSet()
    ledger = directory.open_ledger(job, progress, done)
    return Committer(directory.results(), ledger, progress, done, max_rows=100, commit_seconds=float("inf"))


def test_a_run_that_loses_an_entry_commits_only_the_rows_no_one_has(s3_server, tmp_path: Path) -> None:
    directory = RemoteJobDir(s3_server.url(f"{tmp_path.name}/out"))
    job = directory.write_manifest(new_manifest({"inputs": []}, [], 20, WHOLE))
    first, second = _committer(directory, job), _committer(directory, job)
    for index in range(10):
        first.add(_row(index))
    for index in range(5, 15):
        second.add(_row(index))
    first.commit()
    second.commit()  # entry 1 is taken: it learns of it, and commits rows 10..14 as entry 2
    second.add(_row(7))  # finished late, after the run learned that another run committed it
    second.add(_row(15))
    second.commit()
    progress = directory.load_progress()
    assert [commit.row_ids() for commit in progress.files] == [list(range(10)), list(range(10, 15)), [15]]
    assert [commit.seq for commit in progress.files] == [1, 2, 3]


def test_a_corrupted_result_file_is_found_by_verify_and_redone_by_a_rerun(capsys, s3_server, tmp_path: Path,
                                                                         tiny_llama: Path, data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out")
    assert _run(capsys, tiny_llama, data, out)[0] == 0
    before = _exported(capsys, out, tmp_path / "before.jsonl")
    directory = RemoteJobDir(out)
    damaged = directory.load_progress().files[1]
    path = f"{directory.results_path}/{damaged.file}"
    data_bytes = directory.fs.cat_file(path)
    directory.fs.pipe_file(path, data_bytes[:100] + bytes(byte ^ 0xFF for byte in data_bytes[100:110])
                           + data_bytes[110:])  # the same size: only its bytes tell
    assert _main(capsys, "status", out)[0] == 0  # sizes alone: it looks whole
    code, printed, _ = _main(capsys, "status", out, "--verify")
    assert code == 1 and f"{damaged.file}: its bytes differ from those committed ({damaged.rows} rows)" in printed
    code, printed, _ = _main(capsys, "status", out, "--json")
    assert json.loads(printed)["rows_done"] == ROWS - damaged.rows  # voided: its rows are to be done again
    code, _, err = _run(capsys, tiny_llama, data, out)
    assert code == 0 and f"complete: {ROWS} of {ROWS} rows done" in err
    assert _exported(capsys, out, tmp_path / "after.jsonl") == before
    _assert_entries_once(directory, ROWS)


@pytest.fixture(scope="module")
def long_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough rows for a child process to be stopped in the middle of its job."""
    return write_jsonl(tmp_path_factory.mktemp("remote-long") / "in.jsonl", prompts(LONG_ROWS))


LONG_ROWS = 160


def _finished_once(capsys, out: str, destination: Path) -> None:
    assert [row["row_index"] for row in _exported(capsys, out, destination)] == list(range(LONG_ROWS))
    _assert_entries_once(RemoteJobDir(out), LONG_ROWS)


@pytest.mark.slow
def test_sigkill_and_resume_on_s3(capsys, s3_server, tmp_path: Path, tiny_llama: Path, long_data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out")
    killed_and_resumed(tiny_llama, long_data, out, (), seed=3, env=s3_server.env)
    _finished_once(capsys, out, tmp_path / "results.jsonl")


@pytest.mark.slow
def test_two_runs_at_once_on_one_prefix_commit_every_row_once(capsys, s3_server, tmp_path: Path, tiny_llama: Path,
                                                              long_data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out")
    runs = [start(tiny_llama, long_data, out, env=s3_server.env) for _ in range(2)]
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
    _finished_once(capsys, out, tmp_path / "results.jsonl")
    directory = RemoteJobDir(out)
    uploads = directory.fs.ls(directory.results_path, detail=False)
    assert len({path.rsplit("-", 1)[1] for path in uploads}) == 2  # both wrote: they did overlap


@pytest.mark.slow
def test_a_store_that_goes_away_stops_the_job_with_one_line(capsys, s3_server, tmp_path: Path, tiny_llama: Path,
                                                            long_data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out")
    process = start(tiny_llama, long_data, out, env=s3_server.env)
    try:
        assert wait_for(lambda: commits(out) > 0, process)
    finally:
        s3_server.stop()
    try:
        _, err = process.communicate(timeout=300)
    finally:
        s3_server.start()
    lines = [line for line in err.splitlines() if line.startswith("bulkinfer: error:")]
    assert process.returncode == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "nothing committed is lost" in lines[0]  # unreachable, or failing: either way, rerun when it is back
    process = start(tiny_llama, long_data, out, env=s3_server.env)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    _finished_once(capsys, out, tmp_path / "results.jsonl")


def test_another_job_on_the_prefix_is_refused_unless_forced(capsys, s3_server, tmp_path: Path, tiny_llama: Path,
                                                            data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out")
    assert _run(capsys, tiny_llama, data, out)[0] == 0
    code, _, err = _run(capsys, tiny_llama, data, out, "--max-tokens", "4")
    assert code == 2 and "holds a different job (max_tokens" in err and "Traceback" not in err
    code, _, err = _run(capsys, tiny_llama, data, out, "--max-tokens", "4", "--force")
    assert code == 0 and f"complete: {ROWS} of {ROWS} rows done" in err
    assert json.loads(RemoteJobDir(out).fs.cat_file(f"{out}/job.json"))["fingerprint"]["max_tokens"] == 4
    _assert_entries_once(RemoteJobDir(out), ROWS)


def test_an_output_the_store_cannot_take_is_one_line(capsys, tmp_path: Path, tiny_llama: Path,
                                                                       data: Path) -> None:
    code, _, err = _run(capsys, tiny_llama, data, "s3://bucket/out", "--storage-options", '{"no_such_option": 1}')
    assert code == 2 and "storage_options {'no_such_option': 1} are not the store's" in err.splitlines()[-1]
    code, _, err = _run(capsys, tiny_llama, data, "s3://bucket/out", "--prompt-column", "nope")
    assert code == 2 and "nope" in err.splitlines()[-1]  # the input is checked as for a local output
    code, _, err = _run(capsys, tiny_llama, data, "memory://bucket/out")
    assert code == 2 and err.startswith("bulkinfer: error: memory://bucket/out: an output on object storage must be")
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        code, _, err = _run(capsys, tiny_llama, data, "gs://bucket/out")
        assert code == 2 and "pip install 'bulkinfer[gcs]'" in err.splitlines()[-1]


def test_an_input_in_the_output_prefix_or_holding_it_is_refused(capsys, s3_server, tmp_path: Path,
                                                                 tiny_llama: Path, data: Path) -> None:
    prefix = s3_server.url(tmp_path.name)
    fs = RemoteJobDir(prefix).fs
    fs.put_file(str(data), f"{prefix}/out/in.jsonl")
    for source, out in ((f"{prefix}/out/in.jsonl", f"{prefix}/out/"), (f"{prefix}/", f"{prefix}/out")):
        code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", source, "--output", out, *RUN)
        assert code == 2 and err.count("\n") == 1, err
        assert f"--output {out} is inside the input {prefix}" in err
    assert not RemoteJobDir(f"{prefix}/out").has_job()


def test_an_export_into_the_jobs_prefix_is_refused(capsys, s3_server, tmp_path: Path, tiny_llama: Path,
                                                   data: Path) -> None:
    out = s3_server.url(f"{tmp_path.name}/out")
    assert _run(capsys, tiny_llama, data, out)[0] == 0
    for inside in (f"{out}/results.parquet", f"{out}/shards/more/results.jsonl"):
        code, _, err = _main(capsys, "export", out, inside)
        assert code == 2 and err == (f"bulkinfer: error: {inside}: inside the job output directory {out}, where "
                                     f"only bulkinfer writes; export to a file outside it\n")
    beside = s3_server.url(f"{tmp_path.name}/out-results.parquet")
    assert _main(capsys, "export", out, beside)[0] == 0
    _assert_entries_once(RemoteJobDir(out), ROWS)
