"""The append-only ledger of committed shards: the one source of truth about which rows are done.

Each line records one shard and the row positions it holds, with a checksum. A line is appended and
fsynced only after its shard is durably in place, so every listed shard exists in full. A crash
mid-append leaves at most a torn last line, which fails its checksum and is cut off on the next
start; the rows of that shard are then simply done again.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Iterator

from bulkinfer.durable import sync_dir, sync_file
from bulkinfer.runner.rowset import decode_rows, encode_rows


class LedgerCorruptError(Exception):
    pass


@dataclass(frozen=True)
class Commit:
    seq: int
    shard: str
    rows: int
    errors: int
    first: int  # lowest row position in the shard, so export can skip shards outside a range
    last: int
    ids: str  # the row positions, see rowset.encode_rows

    def row_ids(self) -> list[int]:
        return decode_rows(self.ids)


def make_commit(seq: int, shard: str, row_ids: list[int], errors: int) -> Commit:
    return Commit(seq, shard, len(row_ids), errors, min(row_ids), max(row_ids), encode_rows(row_ids))


def read_commits(path: Path) -> Iterator[Commit]:
    """The committed shards in order; a torn last line is ignored (see Ledger.open)."""
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


def _encode(commit: Commit) -> bytes:
    body = json.dumps(asdict(commit), sort_keys=True, separators=(",", ":"))
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
        return Commit(**record["commit"])
    except (ValueError, KeyError, TypeError):
        return None
