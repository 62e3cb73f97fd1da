"""The ledger: checksummed records, a torn last line cut off, damage elsewhere skipped and reported,
voids that take a commit's rows back, a job record, and a retried commit counted once."""

from pathlib import Path

import pytest

from bulkinfer.runner.outdir.ledger import (
    Commit,
    Ledger,
    LedgerCorruptError,
    Void,
    load_progress,
    make_commit,
    read_records,
)


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
    assert load_progress(path).damaged_lines == []  # a torn last line is a crash's, not damage
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
    assert [c.file for c in progress.files] == ["b"] and progress.damaged_lines == [1, 2]
    _append(path, make_commit(3, "c", [0], 0))  # damage in the middle stays: nothing is edited in place
    assert path.read_bytes().startswith(b"garbage\n") and _files(path) == ["b", "c"]


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


def test_the_job_record_comes_first_and_only_in_a_new_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), job={"version": 1, "rows_total": 3})
    _append(path, make_commit(2, "b", [1], 0), job={"version": 1, "rows_total": 99})
    records = list(read_records(path))
    assert records[0] == {"version": 1, "rows_total": 3} and len(records) == 3
    assert load_progress(path).job == {"version": 1, "rows_total": 3}


def test_a_row_committed_twice_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0, 1], 0), make_commit(2, "b", [1], 0))
    with pytest.raises(LedgerCorruptError, match="row 1 is committed twice"):
        load_progress(path).done_rows()
