"""An output directory on object storage (s3://), against a real S3-protocol server on localhost:
the same guarantees as on disk (every row committed once, verified, resumable), kept by conditional
creates instead of renames and a lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_files import prompts, read_results, write_jsonl
from s3_server import s3_server  # noqa: F401  (the fixture)

from bulkinfer.cli import main
from bulkinfer.runner.outdir.remote_layout import RemoteJobDir

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
