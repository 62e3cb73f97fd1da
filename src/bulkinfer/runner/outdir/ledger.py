"""The append-only ledger: the one source of truth about a job and which of its rows are done.

Each line is one checksummed record:
- job: the job's manifest (fingerprint, inputs, rows_total), the first line, so that a missing or
  edited job.json cannot make a run mistake one job for another;
- commit: one result file, its size and SHA-256, and the row positions it holds;
- void: a committed file found damaged (missing, cut short, altered); its rows are to be done again.

A commit line is appended and fsynced only after its file is durably in place, so every listed file
existed in full. A crash mid-append leaves at most a torn last line, which fails its checksum and
is cut off on the next start. Records are never edited in place: repair appends a void. The same
commit read twice (a retried append) counts once. A line damaged in the middle (by something other
than bulkinfer) is skipped and reported: if it was a commit, its file is no longer listed, so its
rows are done again.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterator

from bulkinfer.durable import sync_dir, sync_file
from bulkinfer.runner.outdir.no_links import open_no_follow, read_no_follow
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
    size: int | None = None  # the file's bytes and their SHA-256; None in ledgers older than both
    digest: str | None = None

    def row_ids(self) -> list[int]:
        return decode_rows(self.ids)


@dataclass(frozen=True)
class Void:
    seq: int
    file: str
    reason: str


@dataclass(frozen=True)
class Damaged:
    """A ledger line that fails its checksum, with its number (from 1)."""

    line: int


def make_commit(seq: int, file: str, row_ids: list[int], errors: int, size: int | None = None,
                digest: str | None = None) -> Commit:
    return Commit(seq, file, len(row_ids), errors, min(row_ids), max(row_ids), encode_rows(row_ids), size, digest)


@dataclass
class JobProgress:
    """What the ledger says: the job, and its live commits (committed, not voided)."""

    job: dict[str, Any] | None = None  # the job record; None in ledgers older than it
    commits: dict[int, Commit] = field(default_factory=dict)  # by seq, in commit order
    next_seq: int = 1
    damaged_lines: list[int] = field(default_factory=list)

    @property
    def files(self) -> list[Commit]:
        return list(self.commits.values())

    @property
    def rows_done(self) -> int:  # rows with a result or an error
        return sum(commit.rows for commit in self.commits.values())

    @property
    def rows_failed(self) -> int:
        return sum(commit.errors for commit in self.commits.values())

    def record(self, commit: Commit) -> None:
        self.commits[commit.seq] = commit
        self.next_seq = max(self.next_seq, commit.seq + 1)

    def void(self, void: Void) -> None:
        self.commits.pop(void.seq, None)

    def done_rows(self) -> RowSet:
        """Every row of a live commit; raises LedgerCorruptError if one is there twice."""
        done = RowSet()
        for commit in self.files:
            for row in commit.row_ids():
                if not done.add(row):
                    raise LedgerCorruptError(f"row {row} is committed twice ({commit.file})")
        return done


def load_progress(ledger_path: Path) -> JobProgress:
    """Fold the ledger's records, in order."""
    progress = JobProgress()
    for record in read_records(ledger_path):
        if isinstance(record, Commit):
            known = progress.commits.get(record.seq)
            if known is not None and known != record:
                raise LedgerCorruptError(f"{ledger_path}: two different commits numbered {record.seq}")
            progress.record(record)
        elif isinstance(record, Void):
            progress.void(record)
        elif isinstance(record, Damaged):
            progress.damaged_lines.append(record.line)
        else:
            progress.job = record
    return progress


Record = Commit | Void | Damaged | dict  # a dict: the job record


def read_records(path: Path) -> Iterator[Record]:
    """The ledger's records in order; a torn last line is left out (see Ledger)."""
    for record, _ in _scan(path):
        yield record


class Ledger:
    """The ledger opened for appending, after cutting off a torn last line. A new ledger starts with
    the job record `job`."""

    def __init__(self, path: Path, job: dict[str, Any] | None = None) -> None:
        self.path = path
        valid_end = 0
        for record, end in _scan(path):
            if not isinstance(record, Damaged):
                valid_end = end
        created = not os.path.lexists(path)
        self._handle: IO[bytes] = os.fdopen(open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
        if self._handle.tell() > valid_end:
            self._handle.truncate(valid_end)
            sync_file(self._handle)
        if created:
            sync_dir(path.parent)
        self._size = valid_end
        if valid_end == 0 and job is not None:
            self._append("job", job)

    def append(self, record: Commit | Void) -> None:
        kind = "commit" if isinstance(record, Commit) else "void"
        self._append(kind, _on_disk(record))

    def written_only_by_us(self) -> bool:
        """Whether the file at our path is still ours and holds nothing we did not append."""
        try:
            stat = self.path.lstat()  # a link put in its place is not ours
        except FileNotFoundError:
            return False
        return stat.st_ino == os.fstat(self._handle.fileno()).st_ino and stat.st_size == self._size

    def close(self) -> None:
        self._handle.close()

    def _append(self, kind: str, body: dict[str, Any]) -> None:
        line = _encode(kind, body)
        self._handle.write(line)
        self._size += len(line)
        sync_file(self._handle)


def _scan(path: Path) -> Iterator[tuple[Record, int]]:
    """Each record with the byte offset just past its line; a damaged line is Damaged, unless it is the
    last, which a crash may have torn."""
    try:
        handle = read_no_follow(path)
    except FileNotFoundError:
        return
    offset = 0
    with handle:
        pending: Damaged | None = None  # a damaged line, told only once a line follows it
        for number, line in enumerate(handle, 1):
            if pending is not None:
                yield pending, offset
                pending = None
            offset += len(line)
            record = _decode(line)
            if record is None:
                pending = Damaged(number)
            else:
                yield record, offset


# On disk a commit names its file "shard", as ledgers always have; records leave out fields at None.
def _on_disk(record: Commit | Void) -> dict[str, Any]:
    body = {("shard" if key == "file" else key): value for key, value in asdict(record).items()}
    return {key: value for key, value in body.items() if value is not None}


def _encode(kind: str, body: dict[str, Any]) -> bytes:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({kind: json.loads(text), "crc32": zlib.crc32(text.encode())},
                      separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> Record | None:
    if not line.endswith(b"\n"):
        return None
    try:
        record = json.loads(line)
        kind = next(key for key in record if key != "crc32")
        text = json.dumps(record[kind], sort_keys=True, separators=(",", ":"))
        if zlib.crc32(text.encode()) != record["crc32"]:
            return None
        if kind == "job":
            return record[kind]
        body = dict(record[kind])
        body["file"] = body.pop("shard")
        return {"commit": Commit, "void": Void}[kind](**body)
    except (ValueError, KeyError, TypeError, StopIteration):
        return None
