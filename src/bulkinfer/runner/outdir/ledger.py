"""The append-only ledger: the one source of truth about a job and which of its rows are done.

Each line is one checksummed record:
- job: the job's manifest (fingerprint, inputs, rows_total), the first line, so that a missing or
  edited job.json cannot make a run mistake one job for another; appended again, superseding it,
  when that line is found damaged;
- commit: one result file, its size and SHA-256, the row positions it holds, and the id of the job
  it belongs to (job_id), so that commits name their job even when both copies of the record are lost;
- void: a committed file found damaged (missing, cut short, altered); its rows are to be done again;
- damage: damaged lines a run has reported and dealt with, so that later runs stay quiet about them.

A commit line is appended and fsynced only after its file is durably in place, so every listed file
existed in full. A crash mid-append leaves at most a torn last line, which fails its checksum and
is cut off on the next start. Records are never edited in place: repair appends a void. The same
commit read twice (a retried append) counts once. A complete line that fails its checksum (damaged by
something other than bulkinfer, wherever it is) is skipped and reported: if it was a commit, its file
is no longer listed, so its rows are done again.

Lines are written unbuffered, each with one fsync: a write that fails (a full disk) leaves nothing
in a buffer for a later flush to fail on, only a torn last line that the next start cuts off.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import asdict, dataclass, field, replace
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
    job: str | None = None  # job_id of the job's fingerprint; None in ledgers older than it

    def row_ids(self) -> list[int]:
        return decode_rows(self.ids)


@dataclass(frozen=True)
class Void:
    seq: int
    file: str
    reason: str


@dataclass(frozen=True)
class Damaged:
    """A ledger line that fails its checksum: its number (from 1), and the CRC-32 of its bytes, so that
    a report of it names this damage and not later damage to the same line."""

    line: int
    crc: int


@dataclass(frozen=True)
class DamageSeen:
    """Damaged lines a run reported and dealt with."""

    lines: tuple[Damaged, ...]


def job_id(fingerprint: dict[str, Any]) -> str:
    """A short hash of a job's fingerprint, stamped on each of its commits."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def make_commit(seq: int, file: str, row_ids: list[int], errors: int, size: int | None = None,
                digest: str | None = None) -> Commit:
    return Commit(seq, file, len(row_ids), errors, min(row_ids), max(row_ids), encode_rows(row_ids), size, digest)


@dataclass
class JobProgress:
    """What the ledger says: the job, and its live commits (committed, not voided)."""

    job: dict[str, Any] | None = None  # the last sound job record; None if there is none
    commits: dict[int, Commit] = field(default_factory=dict)  # by seq, in commit order
    next_seq: int = 1
    damaged: list[Damaged] = field(default_factory=list)
    damage_seen: set[Damaged] = field(default_factory=set)

    @property
    def new_damage(self) -> list[Damaged]:
        """Damaged lines no run has reported yet."""
        return [line for line in self.damaged if line not in self.damage_seen]

    def job_ids(self) -> set[str]:
        """The jobs the live commits name (ledgers older than job ids name none)."""
        return {commit.job for commit in self.commits.values() if commit.job is not None}

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

    def apply(self, record: Record, ledger: object) -> None:
        """Fold in the ledger's next record; `ledger` names it in an error."""
        if isinstance(record, Commit):
            known = self.commits.get(record.seq)
            if known is not None and known != record:
                raise LedgerCorruptError(f"{ledger}: two different commits numbered {record.seq}")
            self.record(record)
        elif isinstance(record, Void):
            self.void(record)
        elif isinstance(record, Damaged):
            self.damaged.append(record)
        elif isinstance(record, DamageSeen):
            self.damage_seen.update(record.lines)
        else:
            self.job = record

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
        progress.apply(record, ledger_path)
    return progress


Record = Commit | Void | Damaged | DamageSeen | dict  # a dict: the job record


def read_records(path: Path) -> Iterator[Record]:
    """The ledger's records in order; a torn last line is left out (see Ledger)."""
    for record, _ in _scan(path):
        yield record


class Ledger:
    """The ledger opened for appending, after cutting off a torn last line. `job`, the job record, is
    appended unless it is already the ledger's last sound one (a new ledger, or one whose record line
    is damaged), and each commit appended is stamped with its job_id."""

    def __init__(self, path: Path, job: dict[str, Any] | None = None) -> None:
        self.path = path
        kept, last_job = 0, None
        for record, end in _scan(path):
            kept = end
            last_job = record if isinstance(record, dict) else last_job
        created = not os.path.lexists(path)
        self._handle: IO[bytes] = os.fdopen(open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab",
                                            buffering=0)
        if self._handle.tell() > kept:
            self._handle.truncate(kept)
            sync_file(self._handle)
        if created:
            sync_dir(path.parent)
        self._size = kept
        if kept and _byte_at(path, kept - 1) != b"\n":
            self._write(b"\n")  # a damaged last line lost its newline: the next record must be a line of its own
        self._job_id = job_id(job["fingerprint"]) if job is not None else None
        if job is not None and last_job != job:
            self._write(_encode("job", job))

    def append(self, record: Commit | Void) -> None:
        self._write(encode_record(record, self._job_id))

    def report_damage(self, lines: list[Damaged]) -> None:
        """Record that `lines` were reported and dealt with."""
        self._write(encode_record(DamageSeen(tuple(lines)), None))

    def written_only_by_us(self) -> bool:
        """Whether the file at our path is still ours and holds nothing we did not append."""
        try:
            stat = self.path.lstat()  # a link put in its place is not ours
        except FileNotFoundError:
            return False
        return stat.st_ino == os.fstat(self._handle.fileno()).st_ino and stat.st_size == self._size

    def close(self) -> None:
        self._handle.close()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = self._handle.write(view)
            self._size += written
            view = view[written:]
        sync_file(self._handle)


def _scan(path: Path) -> Iterator[tuple[Record, int]]:
    """Each record with the byte offset just past its line. A line that fails its checksum is Damaged,
    except a last line with no newline that is not a sound line either: a crash tore it."""
    try:
        handle = read_no_follow(path)
    except FileNotFoundError:
        return
    offset = 0
    with handle:
        for number, line in enumerate(handle, 1):
            offset += len(line)
            record = decode_record(line)
            if record is not None:
                yield record, offset
            elif line.endswith(b"\n") or decode_record(line[:-1] + b"\n") is not None:  # a bit flip, maybe of the newline
                yield Damaged(number, zlib.crc32(line.rstrip(b"\n"))), offset


def _byte_at(path: Path, offset: int) -> bytes:
    with read_no_follow(path) as handle:
        handle.seek(offset)
        return handle.read(1)


# On disk a commit names its file "shard", as ledgers always have; records leave out fields at None.
def _on_disk(record: Commit | Void) -> dict[str, Any]:
    body = {("shard" if key == "file" else key): value for key, value in asdict(record).items()}
    return {key: value for key, value in body.items() if value is not None}


def encode_record(record: Commit | Void | DamageSeen, job: str | None) -> bytes:
    """A commit (stamped with `job`, a job_id), a void or a damage report as one checksummed line."""
    if isinstance(record, Commit):
        return _encode("commit", _on_disk(replace(record, job=job)))
    if isinstance(record, Void):
        return _encode("void", _on_disk(record))
    return _encode("damage", {"lines": [[line.line, line.crc] for line in record.lines]})


def _encode(kind: str, body: dict[str, Any]) -> bytes:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return json.dumps({kind: json.loads(text), "crc32": zlib.crc32(text.encode())},
                      separators=(",", ":")).encode() + b"\n"


def decode_record(line: bytes) -> Record | None:
    """The record of one line, or None if it is not a sound one."""
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
        if kind == "damage":
            return DamageSeen(tuple(Damaged(int(number), int(crc)) for number, crc in record[kind]["lines"]))
        body = dict(record[kind])
        body["file"] = body.pop("shard")
        return {"commit": Commit, "void": Void}[kind](**body)
    except (ValueError, KeyError, TypeError, StopIteration):
        return None
