"""The ledger: checksummed records, a torn last line cut off, damage elsewhere skipped and reported
(once), voids that take a commit's rows back, a job record that commits name, a retried commit
counted once, and a full disk that fails an append without failing the close after it."""

import errno
import os
from pathlib import Path

import pytest
from tiny_disk import mounted_tmpfs

from bulkinfer.runner.outdir.ledger import (
    Commit,
    Ledger,
    LedgerCorruptError,
    Void,
    job_id,
    load_progress,
    make_commit,
    read_records,
)

JOB = {"version": 1, "fingerprint": {"model": "m"}, "rows_total": 3}


def _append(path: Path, *records, job: dict | None = None) -> None:
    ledger = Ledger(path, job=job)
    for record in records:
        ledger.append(record)
    ledger.close()


def _files(path: Path) -> list[str]:
    return [record.file for record in read_records(path) if isinstance(record, Commit)]


def test_commits_read_back_with_their_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "shard-000001.parquet", [5, 2, 9], errors=1, size=10, digest="ab"))
    _append(path, make_commit(2, "shard-000002.parquet", [0, 1], errors=0))
    progress = load_progress(path)
    assert (progress.rows_done, progress.rows_failed, progress.next_seq) == (5, 1, 3)
    assert [(c.file, c.first, c.last, c.size, c.digest) for c in progress.files] == [
        ("shard-000001.parquet", 2, 9, 10, "ab"), ("shard-000002.parquet", 0, 1, None, None)]
    assert sorted(r for r in range(10) if r in progress.done_rows()) == [0, 1, 2, 5, 9]


def test_a_ledger_written_before_sizes_and_digests_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    # A line as ledgers without the job record, sizes or digests wrote it.
    path.write_bytes(b'{"commit":{"errors":0,"first":0,"ids":"eJxjYIAAAAAIAAE=","last":0,"rows":1,"seq":1,'
                     b'"shard":"shard-000001.parquet"},"crc32":584043504}\n')
    [commit] = load_progress(path).files
    assert (commit.file, commit.row_ids(), commit.size) == ("shard-000001.parquet", [0], None)


@pytest.mark.parametrize("cut", [1, 10, -2, -1])
def test_a_torn_last_line_is_ignored_then_cut_off(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), make_commit(2, "b", [1], 0))
    data = path.read_bytes()
    second_start = data.index(b"\n") + 1
    path.write_bytes(data[: second_start + cut] if cut > 0 else data[:cut])  # a crash mid-append
    assert _files(path) == ["a"]
    assert load_progress(path).damaged == []  # a torn last line is a crash's, not damage
    _append(path, make_commit(2, "c", [1], 0))  # the next run appends after the last good line
    assert _files(path) == ["a", "c"]


def test_a_bit_flip_fails_the_checksum(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0))
    path.write_bytes(path.read_bytes().replace(b'"rows":1', b'"rows":7'))
    assert _files(path) == []


def test_damage_before_the_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), make_commit(2, "b", [1], 0))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"garbage\n" + lines[0].replace(b'"rows":1', b'"rows":2') + lines[1])
    progress = load_progress(path)
    assert [c.file for c in progress.files] == ["b"] and [d.line for d in progress.damaged] == [1, 2]
    _append(path, make_commit(3, "c", [0], 0))  # damage in the middle stays: nothing is edited in place
    assert path.read_bytes().startswith(b"garbage\n") and _files(path) == ["b", "c"]


@pytest.mark.parametrize("flipped", ["middle", "newline"])
def test_a_damaged_last_line_is_damage_not_a_tear(tmp_path: Path, flipped: str) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), make_commit(2, "b", [1], 0))
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 40 if flipped == "middle" else -1] ^= 0x01  # a bit of the last line, or its newline
    path.write_bytes(bytes(data))
    assert [d.line for d in load_progress(path).damaged] == [2] and _files(path) == ["a"]
    _append(path, make_commit(3, "c", [1], 0))  # kept, not cut off; the next record is a line of its own
    assert path.read_bytes().startswith(bytes(data)) and _files(path) == ["a", "c"]
    assert [d.line for d in load_progress(path).damaged] == [2]


def test_damage_once_reported_is_not_new_until_the_line_changes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), make_commit(2, "b", [1], 0))
    path.write_bytes(path.read_bytes().replace(b'"rows":1', b'"rows":7', 1))
    ledger = Ledger(path)
    ledger.report_damage(load_progress(path).new_damage)
    ledger.close()
    assert [d.line for d in load_progress(path).damaged] == [1] and load_progress(path).new_damage == []
    path.write_bytes(path.read_bytes().replace(b'"rows":7', b'"rows":8', 1))  # further damage to that line
    assert [d.line for d in load_progress(path).new_damage] == [1]


def test_a_void_takes_the_rows_of_a_commit_back(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0, 1], 0), make_commit(2, "b", [2], 0), Void(1, "a", "missing"))
    progress = load_progress(path)
    assert [c.file for c in progress.files] == ["b"] and progress.rows_done == 1 and progress.next_seq == 3


def test_a_commit_appended_twice_counts_once_and_two_different_ones_with_one_number_are_refused(tmp_path: Path):
    path = tmp_path / "ledger.jsonl"
    commit = make_commit(1, "a", [0, 1], 0, 5, "ff")
    _append(path, commit, commit)  # a retried append after an fsync that failed
    assert load_progress(path).rows_done == 2
    _append(path, make_commit(1, "a", [2], 0))
    with pytest.raises(LedgerCorruptError, match="two different commits numbered 1"):
        load_progress(path)


def test_the_job_record_comes_first_and_commits_name_its_job(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), job=JOB)
    _append(path, make_commit(2, "b", [1], 0), job=JOB)
    records = list(read_records(path))
    assert records[0] == JOB and len(records) == 3
    progress = load_progress(path)
    assert progress.job == JOB and progress.job_ids() == {job_id(JOB["fingerprint"])}


def test_a_damaged_job_record_is_superseded_by_one_appended(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), job=JOB)
    path.write_bytes(path.read_bytes().replace(b'"rows_total":3', b'"rows_total":4', 1))
    assert load_progress(path).job is None
    _append(path, job=JOB)
    records = list(read_records(path))
    assert records[-1] == JOB and load_progress(path).job == JOB
    _append(path, job=JOB)  # sound now: not appended again
    assert list(read_records(path)) == records


def test_a_row_committed_twice_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0, 1], 0), make_commit(2, "b", [1], 0))
    with pytest.raises(LedgerCorruptError, match="row 1 is committed twice"):
        load_progress(path).done_rows()


@pytest.fixture
def tiny_disk(tmp_path: Path):
    with mounted_tmpfs(tmp_path, "64k") as mount:
        yield mount


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"x" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_fails_the_append_not_the_close_and_loses_nothing_committed(tiny_disk: Path) -> None:
    path = tiny_disk / "ledger.jsonl"
    ledger = Ledger(path, job=JOB)
    ledger.append(make_commit(1, "a", [0], 0))
    _fill(tiny_disk)
    with pytest.raises(OSError) as failed:
        for seq in range(2, 100):  # the first page fills, and the next cannot be had
            ledger.append(make_commit(seq, f"f{seq}", [seq], 0))
    assert failed.value.errno == errno.ENOSPC
    ledger.close()  # nothing left in a buffer to fail again
    committed = _files(path)
    assert committed[0] == "a" and committed == [f"f{seq}" if seq > 1 else "a" for seq in range(1, len(committed) + 1)]
    os.unlink(tiny_disk / "filler")
    _append(path, make_commit(len(committed) + 1, "z", [99], 0), job=JOB)  # a torn tail, if any, is cut off
    assert _files(path) == committed + ["z"] and load_progress(path).damaged == []
