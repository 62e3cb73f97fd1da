"""The ledger of a job on object storage: one object per entry, each created only if it is absent.

Entry N is `ledger/00000N.json`, holding one record as a line of the local ledger holds it (a commit,
numbered N, or a void). A store has no append, but it has a conditional create (S3's `If-None-Match:
*`, GCS's `ifGenerationMatch=0`): of two runs that create entry N, exactly one succeeds, and the
other learns that N is taken (SeqTaken). Entries are created in order, each only after every entry
before it was read, so the entries are numbered without a gap and each run has read all of
1..N-1 when it creates N: that is what keeps a row in one live commit (see Committer.commit and
docs/jobs.md).
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import fsspec

from bulkinfer.runner.outdir.ledger import (Commit, Damaged, DamageSeen, JobProgress, Void, decode_record, encode_record,
                                            job_id)
from bulkinfer.runner.outdir.store_errors import store_errors
from bulkinfer.runner.rowset import RowSet

_ENTRY = re.compile(r"(\d{6,})\.json")


class SeqTaken(Exception):
    """Another run created the ledger entry first."""


class RemoteLedger:
    """Appends entries to the ledger at `url` (a folder), keeping `progress` and `done` (the rows of every
    live commit this run knows) up to date with every entry it learns of."""

    def __init__(self, fs: fsspec.AbstractFileSystem, url: str, progress: JobProgress, done: RowSet,
                 job: dict[str, Any]) -> None:
        self.fs = fs
        self.path = url
        self.progress = progress
        self.done = done
        self._job_id = job_id(job["fingerprint"])

    def append(self, record: Commit | Void | DamageSeen) -> None:
        """Create the next entry. A commit must carry the next number and raises SeqTaken if another run
        took it; any other record is simply retried at the next free number."""
        while True:
            number = self.progress.next_seq
            if isinstance(record, Commit) and record.seq != number:
                raise ValueError(f"commit {record.seq} is not the next entry, {number}")
            if create(self.fs, entry_url(self.path, number), encode_record(record, self._job_id)):
                self.progress.next_seq = number + 1
                return
            self.catch_up()
            if isinstance(record, Commit):
                raise SeqTaken(number)

    def catch_up(self) -> None:
        """Learn the entries other runs created since the last one known."""
        for commit in catch_up(self.fs, self.path, self.progress):
            self.done.update(commit.row_ids())

    def report_damage(self, lines: list[Damaged]) -> None:
        self.append(DamageSeen(tuple(lines)))

    def close(self) -> None:
        """Nothing is held open on a store."""


def load_entries(fs: fsspec.AbstractFileSystem, url: str) -> JobProgress:
    """Every entry of the ledger at `url`: those one listing finds, fetched at once, then any created since."""
    progress = JobProgress()
    with store_errors(url):
        numbers = entry_numbers(fs, url)
        contents = fs.cat([entry_url(url, number) for number in numbers]) if numbers else {}
        by_number = {int(_ENTRY.fullmatch(path.rsplit("/", 1)[1])[1]): data for path, data in contents.items()}
        for number in numbers:
            apply_entry(progress, number, by_number[number], url)
    catch_up(fs, url, progress)
    return progress


def catch_up(fs: fsspec.AbstractFileSystem, url: str, progress: JobProgress) -> list[Commit]:
    """Read the entries after the last one `progress` knows, until the first that does not exist yet;
    returns the commits among them."""
    learned = []
    with store_errors(url):
        while (data := _read(fs, entry_url(url, progress.next_seq))) is not None:
            record = apply_entry(progress, progress.next_seq, data, url)
            if isinstance(record, Commit):
                learned.append(record)
    return learned


def entry_numbers(fs: fsspec.AbstractFileSystem, url: str) -> list[int]:
    """The numbers of the entries one listing of the ledger at `url` finds, in order."""
    with store_errors(url):
        fs.invalidate_cache(url)
        try:
            names = [path.rsplit("/", 1)[1] for path in fs.ls(url, detail=False)]
        except FileNotFoundError:
            return []
    return sorted(int(match[1]) for name in names if (match := _ENTRY.fullmatch(name)))


def apply_entry(progress: JobProgress, number: int, data: bytes, url: str) -> Any:
    """Fold entry `number` into `progress`; returns its record (Damaged if it fails its checksum)."""
    record = decode_record(data) or Damaged(number, zlib.crc32(data.rstrip(b"\n")))
    progress.apply(record, url)
    progress.next_seq = max(progress.next_seq, number + 1)
    return record


def entry_url(url: str, number: int) -> str:
    return f"{url}/{number:06d}.json"


def create(fs: fsspec.AbstractFileSystem, url: str, data: bytes) -> bool:
    """Create the object only if it does not exist; False if it does. A retried request whose first try
    went through also finds it there: the caller then reads it back like anyone else's."""
    with store_errors(url):
        try:
            fs.pipe_file(url, data, mode="create")
        except FileExistsError:
            return False
    return True


def _read(fs: fsspec.AbstractFileSystem, url: str) -> bytes | None:
    try:
        return fs.cat_file(url)
    except FileNotFoundError:
        return None
