"""The append-only ledger of committed result files: the one source of truth about which rows are done.

Each line records one result file and the row positions it holds, with a checksum. A line is
appended and fsynced only after its file is durably in place, so every listed file exists in full.
A crash mid-append leaves at most a torn last line, which fails its checksum and is cut off on the
next start; the rows of that file are then simply done again.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

from bulkinfer.durable import sync_dir, sync_file
from bulkinfer.runner.rowset import RowSet, decode_rows, encode_rows


class LedgerCorruptError(Exception):
    pass


@dataclass(frozen=True)
class Commit:
    seq: int
    file: str  # the result file's name in the results folder
    rows: int
    errors: int
    first: int  # lowest row position in the file, so export can skip files outside a range
    last: int
    ids: str  # the row positions, see rowset.encode_rows

    def row_ids(self) -> list[int]:
        return decode_rows(self.ids)


def make_commit(seq: int, file: str, row_ids: list[int], errors: int) -> Commit:
    return Commit(seq, file, len(row_ids), errors, min(row_ids), max(row_ids), encode_rows(row_ids))


@dataclass(frozen=True)
class FileSpan:
    """A committed result file and the lowest and highest row positions in it."""

    name: str
    first: int
    last: int


@dataclass
class JobProgress:
    """What the ledger says is done: counts for status, file spans for export."""

    rows_done: int = 0  # rows with a result or an error
    rows_failed: int = 0  # rows with an error
    files: list[FileSpan] = field(default_factory=list)
    next_seq: int = 1

    def record(self, commit: Commit) -> None:
        self.rows_done += commit.rows
        self.rows_failed += commit.errors
        self.files.append(FileSpan(commit.file, commit.first, commit.last))
        self.next_seq = commit.seq + 1


def load_progress(ledger_path: Path, done: RowSet | None = None) -> JobProgress:
    """Fold the ledger; with `done`, also add every committed row to it and check none is there twice."""
    progress = JobProgress()
    for commit in read_commits(ledger_path):
        progress.record(commit)
        if done is not None:
            for row in commit.row_ids():
                if not done.add(row):
                    raise LedgerCorruptError(f"{ledger_path}: row {row} is committed twice ({commit.file})")
    return progress


def read_commits(path: Path) -> Iterator[Commit]:
    """The committed files in order; a torn last line is ignored (see Ledger)."""
    for commit, _ in _scan(path):
        yield commit


class Ledger:
    """The ledger opened for appending, after cutting off a torn last line."""

    def __init__(self, path: Path) -> None:
        valid_end = 0
        for _, valid_end in _scan(path):
            pass
        created = not path.exists()
        self._handle: IO[bytes] = open(path, "ab")
        if self._handle.tell() > valid_end:
            self._handle.truncate(valid_end)
            sync_file(self._handle)
        if created:
            sync_dir(path.parent)

    def append(self, commit: Commit) -> None:
        self._handle.write(_encode(commit))
        sync_file(self._handle)

    def close(self) -> None:
        self._handle.close()


def _scan(path: Path) -> Iterator[tuple[Commit, int]]:
    """Each valid commit with the byte offset just past its line."""
    if not path.exists():
        return
    offset = 0
    with open(path, "rb") as handle:
        lines = iter(handle)
        for number, line in enumerate(lines, 1):
            commit = _decode(line)
            if commit is None:
                if next(lines, None) is not None:
                    raise LedgerCorruptError(f"{path}: line {number} is damaged but is not the last line; "
                                             f"the output directory was modified by something other than bulkinfer")
                return
            offset += len(line)
            yield commit, offset


# On disk a commit names its file "shard", as ledgers always have.
def _on_disk(commit: Commit) -> dict[str, Any]:
    return {"seq": commit.seq, "shard": commit.file, "rows": commit.rows, "errors": commit.errors,
            "first": commit.first, "last": commit.last, "ids": commit.ids}


def _encode(commit: Commit) -> bytes:
    body = json.dumps(_on_disk(commit), sort_keys=True, separators=(",", ":"))
    return json.dumps({"commit": json.loads(body), "crc32": zlib.crc32(body.encode())},
                      separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> Commit | None:
    if not line.endswith(b"\n"):
        return None
    try:
        record = json.loads(line)
        body = json.dumps(record["commit"], sort_keys=True, separators=(",", ":"))
        if zlib.crc32(body.encode()) != record["crc32"]:
            return None
        fields = dict(record["commit"])
        fields["file"] = fields.pop("shard")
        return Commit(**fields)
    except (ValueError, KeyError, TypeError):
        return None
