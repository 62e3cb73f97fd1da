"""`export` and `status` on paths that are not what they should be: one line and exit 2, and nothing
inside an output directory written by export."""

import os
from pathlib import Path

import pytest
from cli_helpers import invoke, one_line_error
from runner_files import committed_job, read_results
from tiny_disk import mounted_tmpfs

ROWS = [{"row_index": 0, "prompt": "a", "error": None}, {"row_index": 1, "prompt": "b", "error": None}]


@pytest.fixture
def job(tmp_path: Path) -> Path:
    return committed_job(tmp_path / "job", [ROWS], rows_total=2)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("command", ["status", "export"])
@pytest.mark.parametrize("place, message", [("missing", "missing: no such directory"),
                                            ("a-file", "a-file: not a directory")])
def test_status_and_export_of_no_directory_are_one_line(capsys, tmp_path: Path, command: str, place: str,
                                                        message: str) -> None:
    (tmp_path / "a-file").write_text("")
    argv = [command, tmp_path / place] + ([tmp_path / "out.jsonl"] if command == "export" else [])
    assert message in one_line_error(*invoke(capsys, *argv)[::2])


@pytest.mark.parametrize("destination", ["job/ledger.jsonl", "job/job.json.jsonl", "job/new.parquet",
                                         "job/shards/shard-000001.parquet", "job/shards/new.jsonl",
                                         "other/x.jsonl", "other/shards/x.jsonl",
                                         "linked/x.jsonl", "link-to-ledger.jsonl"])
@pytest.mark.parametrize("format", ["rows", "openai-batch"])
def test_export_refuses_any_place_inside_an_output_directory(capsys, tmp_path: Path, job: Path, destination: str,
                                                             format: str) -> None:
    committed_job(tmp_path / "other", [ROWS], rows_total=2)  # another job: its directory is as much off limits
    (tmp_path / "linked").symlink_to(job / "shards")
    (tmp_path / "link-to-ledger.jsonl").symlink_to(job / "ledger.jsonl")
    before = _snapshot(tmp_path)
    code, _, err = invoke(capsys, "export", job, tmp_path / destination, "--format", format)
    assert "where only bulkinfer writes" in one_line_error(code, err)
    assert _snapshot(tmp_path) == before
    assert invoke(capsys, "status", "--verify", job)[0] == 0


@pytest.mark.parametrize("destination, format, message", [
    ("/proc/x.jsonl", "rows", "/proc/x.jsonl: cannot be written"),
    ("/proc/x.jsonl", "openai-batch", "/proc/x.jsonl: cannot be written"),
    ("missing/x.jsonl", "openai-batch", "missing: no such directory"),
    ("missing/x.jsonl", "rows", "missing: no such directory"),
    ("a-dir.jsonl", "rows", "a-dir.jsonl: is a directory"),
    (".", "openai-batch", ": is a directory"),
])
def test_export_to_a_place_it_cannot_write_is_one_line(capsys, tmp_path: Path, job: Path, destination: str,
                                                       format: str, message: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-dir.jsonl").mkdir()
    code, _, err = invoke(capsys, "export", job, destination, "--format", format)
    assert message in one_line_error(code, err)


def test_status_and_export_expand_the_home_directory(capsys, tmp_path: Path, job: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out, err = invoke(capsys, "status", "~/job")
    assert (code, out) == (0, "complete: 2 of 2 rows done, 0 with errors\n"), err
    assert invoke(capsys, "export", "~/job", "~/out.parquet")[0] == 0
    assert read_results(tmp_path / "out.parquet") == ROWS
    assert not any(path.name == "~" for path in Path(os.getcwd()).iterdir())


@pytest.mark.parametrize("format, name", [("rows", "out.jsonl"), ("rows", "out.parquet"), ("openai-batch", "out.jsonl")])
def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(capsys, tmp_path: Path, format: str,
                                                                     name: str) -> None:
    rows = [{"row_index": i, "prompt": os.urandom(60_000).hex(), "error": None} for i in range(2)]
    job = committed_job(tmp_path / "job", [rows], rows_total=2)
    with mounted_tmpfs(tmp_path, "64k") as disk:
        code, _, err = invoke(capsys, "export", job, disk / name, "--format", format)
        assert code == 1 and err.count("\n") == 1 and err.startswith("bulkinfer: error: disk full writing ")
        assert list(disk.iterdir()) == []
