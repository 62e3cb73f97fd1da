from pathlib import Path

import pytest

from bulkinfer.runner.outdir.ledger import Ledger, LedgerCorruptError, make_commit, read_commits
from bulkinfer.runner.outdir.ledger import load_progress
from bulkinfer.runner.rowset import RowSet


def _append(path: Path, *commits) -> None:
    ledger = Ledger(path)
    for commit in commits:
        ledger.append(commit)
    ledger.close()


def test_commits_read_back_with_their_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "shard-000001.parquet", [5, 2, 9], errors=1))
    _append(path, make_commit(2, "shard-000002.parquet", [0, 1], errors=0))
    done = RowSet()
    progress = load_progress(path, done)
    assert (progress.rows_done, progress.rows_failed, progress.next_seq) == (5, 1, 3)
    assert [(s.name, s.first, s.last) for s in progress.files] == [("shard-000001.parquet", 2, 9),
                                                                   ("shard-000002.parquet", 0, 1)]
    assert sorted(r for r in range(10) if r in done) == [0, 1, 2, 5, 9]


@pytest.mark.parametrize("cut", [1, 10, -2, -1])
def test_a_torn_last_line_is_ignored_then_cut_off(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), make_commit(2, "b", [1], 0))
    data = path.read_bytes()
    second_start = data.index(b"\n") + 1
    path.write_bytes(data[: second_start + cut] if cut > 0 else data[:cut])  # a crash mid-append
    assert [c.file for c in read_commits(path)] == ["a"]
    _append(path, make_commit(2, "c", [1], 0))  # the next run appends after the last good line
    assert [c.file for c in read_commits(path)] == ["a", "c"]


def test_a_bit_flip_fails_the_checksum(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0))
    path.write_bytes(path.read_bytes().replace(b'"rows":1', b'"rows":7'))
    assert list(read_commits(path)) == []


def test_damage_before_the_last_line_is_an_error_not_silence(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0], 0), make_commit(2, "b", [1], 0))
    path.write_bytes(b"garbage\n" + path.read_bytes())
    with pytest.raises(LedgerCorruptError, match="line 1"):
        list(read_commits(path))


def test_a_row_committed_twice_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _append(path, make_commit(1, "a", [0, 1], 0), make_commit(2, "b", [1], 0))
    with pytest.raises(LedgerCorruptError, match="row 1 is committed twice"):
        load_progress(path, RowSet())
