"""The output directory is bulkinfer's alone: links in it are refused, never followed, and a file
bulkinfer did not write is never deleted, driven through the command line on a real tiny job."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import invoke, one_line_error
from runner_files import prompts, write_jsonl

from bulkinfer.errors import UsageError
from bulkinfer.runner.outdir.ledger import Ledger
from bulkinfer.runner.outdir.lock import JobLock
from bulkinfer.runner.outdir.result_files import ResultFiles

OUTSIDE_BYTES = b"a file of the user's, outside the output directory\n"


@pytest.fixture
def run(capsys: pytest.CaptureFixture, tmp_path: Path, tiny_llama: Path):
    """`bulkinfer run` of a 4-row job into tmp_path/out, with extra flags; (exit status, stderr)."""
    data = write_jsonl(tmp_path / "in.jsonl", prompts(4))

    def run_job(*flags: str) -> tuple[int, str]:
        code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", data, "--output", tmp_path / "out",
                              "--max-tokens", "2", "--shard-rows", "2", *flags)
        return code, err

    return run_job


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the output directory holding a file of the user's."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "keep.txt").write_bytes(OUTSIDE_BYTES)
    return folder


def _refused_as_link(code: int, err: str, link: Path) -> None:
    assert f"{link}: is a symbolic link" in one_line_error(code, err), err


@pytest.mark.parametrize("name", ["ledger.jsonl", "job.json", ".lock"])
def test_a_fifo_in_place_of_a_job_file_is_refused_not_waited_on(capsys, tmp_path, run, name) -> None:
    assert run()[0] == 0
    out = tmp_path / "out"
    (out / name).unlink()
    os.mkfifo(out / name)
    for code, err in [run(), invoke(capsys, "status", out)[::2]]:
        assert f"{out / name}: is not a regular file" in one_line_error(code, err)


def test_a_results_folder_linked_elsewhere_is_refused_and_its_files_kept(capsys, tmp_path, run, outside) -> None:
    assert run()[0] == 0
    out = tmp_path / "out"
    shutil.rmtree(out / "shards")
    (out / "shards").symlink_to(outside, target_is_directory=True)
    _refused_as_link(*run(), out / "shards")
    for command in (["status"], ["status", "--verify"], ["export", tmp_path / "x.jsonl"]):
        code, _, err = invoke(capsys, *command[:1], out, *command[1:])
        _refused_as_link(code, err, out / "shards")
    assert [path.name for path in outside.iterdir()] == ["keep.txt"]
    assert (outside / "keep.txt").read_bytes() == OUTSIDE_BYTES


@pytest.mark.parametrize("name", [".lock", "ledger.jsonl", "job.json", "stats.json", ".lock-2-of-4",
                                  "ledger-2-of-4.jsonl", "job-2-of-4.json", "stats-2-of-4.json"])
def test_a_job_file_linked_elsewhere_is_refused_and_its_target_untouched(tmp_path, run, outside, name) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(outside / "keep.txt")
    _refused_as_link(*run(), out / name)
    assert (outside / "keep.txt").read_bytes() == OUTSIDE_BYTES


def test_a_shards_results_folder_linked_elsewhere_is_refused(tmp_path, run, outside) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "shards-2-of-4").symlink_to(outside, target_is_directory=True)
    _refused_as_link(*run("--num-shards", "4", "--shard", "2"), out / "shards-2-of-4")
    assert [path.name for path in outside.iterdir()] == ["keep.txt"]


def test_a_directory_holding_only_a_linked_ledger_is_no_job(capsys, tmp_path, run, outside) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "ledger.jsonl").symlink_to(outside / "keep.txt")
    for command in (["status"], ["export", tmp_path / "x.jsonl"]):
        code, _, err = invoke(capsys, *command[:1], out, *command[1:])
        _refused_as_link(code, err, out / "ledger.jsonl")
    _refused_as_link(*run(), out / "ledger.jsonl")
    assert (outside / "keep.txt").read_bytes() == OUTSIDE_BYTES


def test_a_result_file_linked_elsewhere_is_neither_read_nor_exported(capsys, tmp_path, run, outside) -> None:
    assert run()[0] == 0
    out = tmp_path / "out"
    committed = sorted((out / "shards").iterdir())[0]
    copy = outside / committed.name  # the same bytes: only the link shows it is not ours
    shutil.copyfile(committed, copy)
    committed.unlink()
    committed.symlink_to(copy)
    for command in (["status", "--verify"], ["export", tmp_path / "x.jsonl"]):
        code, _, err = invoke(capsys, *command[:1], out, *command[1:])
        _refused_as_link(code, err, committed)
    assert not (tmp_path / "x.jsonl").exists()
    _refused_as_link(*run(), committed)
    assert copy.exists()


def test_a_users_file_in_the_results_folder_is_kept_named_by_status_and_stops_a_run(capsys, tmp_path, run) -> None:
    assert run()[0] == 0
    out = tmp_path / "out"
    notes = out / "shards" / "notes.txt"
    notes.write_bytes(OUTSIDE_BYTES)
    code, err = run()
    assert f"{notes}: not written by bulkinfer" in one_line_error(code, err) and "move it out" in err
    assert notes.read_bytes() == OUTSIDE_BYTES
    code, out_text, _ = invoke(capsys, "status", out)
    assert code == 0 and f"not written by bulkinfer: {notes}" in out_text
    notes.unlink()
    assert run()[0] == 0


def test_a_directory_in_the_results_folder_stops_a_run_in_one_line(tmp_path, run) -> None:
    assert run()[0] == 0
    folder = tmp_path / "out" / "shards" / "mine"
    folder.mkdir()
    (folder / "keep.txt").write_bytes(OUTSIDE_BYTES)
    code, err = run()
    assert f"{folder}: not written by bulkinfer" in one_line_error(code, err)
    assert (folder / "keep.txt").read_bytes() == OUTSIDE_BYTES


def test_a_file_in_place_of_the_results_folder_stops_a_run_and_is_kept(capsys, tmp_path, run) -> None:
    assert run()[0] == 0
    out = tmp_path / "out"
    shutil.rmtree(out / "shards")
    (out / "shards").write_bytes(OUTSIDE_BYTES)
    code, out_text, _ = invoke(capsys, "status", out)  # exit 1: the committed files are missing, too
    assert code == 1 and f"not written by bulkinfer: {out / 'shards'}" in out_text
    code, err = run()
    assert f"{out / 'shards'}: not written by bulkinfer" in one_line_error(code, err)
    assert (out / "shards").read_bytes() == OUTSIDE_BYTES


def test_a_fifo_in_place_of_a_result_file_is_reported_not_waited_on(capsys, tmp_path, run) -> None:
    assert run()[0] == 0
    committed = sorted((tmp_path / "out" / "shards").iterdir())[0]
    committed.unlink()
    os.mkfifo(committed)
    code, out_text, _ = invoke(capsys, "status", "--verify", tmp_path / "out")
    assert code == 1 and f"damaged: {committed}: not a file" in out_text
    assert f"not written by bulkinfer: {committed}" in out_text
    code, err = run()
    assert f"{committed}: not written by bulkinfer" in one_line_error(code, err)


def test_only_our_uncommitted_files_are_removed(tmp_path: Path) -> None:
    files = ResultFiles(tmp_path)
    for name in ("shard-000001.parquet", "shard-000002.parquet", ".shard-000003.jsonl.tmp", "shard-1234567.jsonl"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "shard-000009.parquet.bak").write_bytes(OUTSIDE_BYTES)
    assert [path.name for path in files.foreign()] == ["shard-000009.parquet.bak"]
    files.remove_except({"shard-000001.parquet"})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["shard-000001.parquet", "shard-000009.parquet.bak"]


def test_a_link_put_in_place_after_the_checks_is_still_not_followed(tmp_path: Path, outside: Path) -> None:
    target = outside / "keep.txt"
    for name, open_it in [("ledger.jsonl", Ledger), (".lock", lambda path: JobLock(path).acquire())]:
        (tmp_path / name).symlink_to(target)
        with pytest.raises(UsageError, match="is a symbolic link"):
            open_it(tmp_path / name)
    (tmp_path / "shards").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UsageError, match="is a symbolic link"):
        ResultFiles(tmp_path / "shards").write(1, [{"row_index": 0, "error": None}])
    (tmp_path / "results").mkdir()
    os.symlink(target, tmp_path / "results" / ".shard-000001.parquet.tmp")
    with pytest.raises(UsageError, match="is a symbolic link"):
        ResultFiles(tmp_path / "results").write(1, [{"row_index": 0, "error": None}])
    assert sorted(path.name for path in outside.iterdir()) == ["keep.txt"] and target.read_bytes() == OUTSIDE_BYTES


LINKED_ENTRIES = ["job.json", "ledger.jsonl", ".lock", "stats.json", "shards", ".job.json.tmp", ".stats.json.tmp",
                  "shards/shard-000001.parquet", "shards/.shard-000003.parquet.tmp", "job-2-of-4.json",
                  "ledger-2-of-4.jsonl", ".lock-2-of-4", "stats-2-of-4.json", "shards-2-of-4",
                  "shards-2-of-4/shard-000001.parquet"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "status", "status --verify", "export"])
def test_every_entry_linked_anywhere_is_refused_by_every_command(capsys, tmp_path, run, command) -> None:
    """Each of the job's files, of a whole job and of a shard, as a link to a file, a folder or nothing."""
    whole, shard = tmp_path / "whole", tmp_path / "shard"
    for base, flags in ((whole, []), (shard, ["--num-shards", "4", "--shard", "2"])):
        assert run(*flags)[0] == 0
        (tmp_path / "out").rename(base)
    for case, (name, target) in enumerate((n, t) for n in LINKED_ENTRIES for t in ("file", "dir", "dangling")):
        sharded = "2-of-4" in name
        out, outside = tmp_path / "out", tmp_path / f"outside{case}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(shard if sharded else whole, out)
        outside.mkdir()
        (outside / "keep.txt").write_bytes(OUTSIDE_BYTES)
        link = out / name
        if link.is_dir():
            shutil.rmtree(link)
        link.unlink(missing_ok=True)
        link.symlink_to({"file": outside / "keep.txt", "dir": outside, "dangling": outside / "none"}[target])
        if command == "run":
            code, err = run(*(["--num-shards", "4", "--shard", "2"] if sharded else []))
        else:
            words = command.split()
            code, _, err = invoke(capsys, words[0], out, *words[1:], *([tmp_path / "x.jsonl"] if words[0] == "export"
                                                                        else []))
        _refused_as_link(code, err, link)
        assert [path.name for path in outside.iterdir()] == ["keep.txt"], (name, target)
        assert (outside / "keep.txt").read_bytes() == OUTSIDE_BYTES and not (tmp_path / "x.jsonl").exists()
