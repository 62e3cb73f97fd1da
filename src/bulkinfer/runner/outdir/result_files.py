"""Result files: rows written to Parquet or JSONL, durably, and read back by position.

A file is written to a temporary name, fsynced, then renamed into place. It only counts once the
ledger records it, with its size and SHA-256; files of ours the ledger does not know (left by a crash
between rename and ledger append, or mid-write) are deleted on the next start, and a listed file
whose bytes are no longer those is found by `damage`. Anything else in the folder was not written by
bulkinfer and is never deleted (`foreign`). Files are opened in the folder without following a link
at the folder or at the file (no_links).

Rows become Arrow tables by one rule for every file (row_tables).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bulkinfer.durable import publish, sync_file
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.outdir.no_links import open_no_follow, read_no_follow
from bulkinfer.runner.outdir.row_tables import json_line, rows_to_table

EXTENSIONS = {"parquet": ".parquet", "jsonl": ".jsonl"}
# The names of the files bulkinfer writes in a results folder: result files and their temporary names.
_OUR_FILE = re.compile(r"shard-\d{6,}\.(?:parquet|jsonl)|\.shard-\d{6,}\.(?:parquet|jsonl)\.tmp")
# Values (rows x columns) a result file holds at most. Its rows are held as a table to write it and
# to read any of them back, and rows of distinct JSONL keys make a column each: 10,000 such rows in
# one file would be 100 million values, nearly all null.
FILE_CELLS = 4_000_000
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class WrittenFile:
    name: str
    size: int
    digest: str  # SHA-256 of its bytes, hex
    errors: int  # rows with an error


class ResultFiles:
    """The results folder of one job (or one shard of it)."""

    def __init__(self, directory: Path, fmt: str = "parquet", input_types: dict[str, pa.DataType] | None = None,
                 result_types: dict[str, pa.DataType] | None = None):
        """`input_types`: those of a Parquet input's columns; `result_types`: the task's (tasks.result_types).
        Parquet files keep both even where a column has no value; JSON has no types to keep."""
        self.directory = directory
        self.format = fmt
        self.input_types = input_types or {}
        self.result_types = result_types or {}

    def path_of(self, seq: int) -> Path:
        return self.directory / f"shard-{seq:06d}{EXTENSIONS[self.format]}"

    def write(self, seq: int, rows: list[dict[str, Any]]) -> WrittenFile:
        """Write rows durably as file number `seq`; returns what the ledger records of it."""
        path = self.path_of(seq)
        tmp = path.with_name(f".{path.name}.tmp")
        with self._folder() as folder, \
                os.fdopen(open_no_follow(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, dir_fd=folder), "w+b") as handle:
            errors = self.serialize(handle, rows)
            sync_file(handle)
            handle.seek(0)
            written = WrittenFile(path.name, os.fstat(handle.fileno()).st_size, file_digest(handle), errors)
            publish(tmp, path, dir_fd=folder)
        return written

    def serialize(self, handle: IO[bytes], rows: list[dict[str, Any]]) -> int:
        """Write `rows` in position order to the empty `handle`, the file's whole content; returns how many
        are error rows (a row whose values cannot be written becomes one)."""
        rows = sorted(rows, key=lambda row: row[ROW_INDEX])  # so export's range reads touch few row groups
        try:
            self._write_rows(handle, rows)
        except OSError:
            raise
        except _UNWRITABLE:
            # One row's values must not stop every commit of every run: it becomes an error row.
            rows = [row if self._fits(row) else _unwritable(row) for row in rows]
            handle.seek(0)
            handle.truncate()
            self._write_rows(handle, rows)
        return sum(row.get("error") is not None for row in rows)

    def location(self, name: str) -> str:
        """Where the file `name` is, as the user reads it."""
        return str(self.directory / name)

    def damage(self, name: str, size: int | None, digest: str | None) -> str | None:
        """Why the file is not what was committed (missing, another size, other bytes); None if it is."""
        try:
            handle = self._reader(name)
        except (FileNotFoundError, NotADirectoryError):  # the folder or the file
            return "missing"
        with handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return "not a file"
            actual = info.st_size
            if size is not None and actual != size:
                return f"{actual:,} bytes where {size:,} were committed"
            if digest is not None and file_digest(handle) != digest:
                return "its bytes differ from those committed"
        return None

    def row_ids(self, name: str) -> list[int]:
        """The row positions the file holds, in its order."""
        with self._reader(name) as handle:
            if name.endswith(".parquet"):
                return pq.read_table(handle, columns=[ROW_INDEX]).column(ROW_INDEX).to_pylist()
            return _read_jsonl(handle).column(ROW_INDEX).to_pylist()

    def schema(self, name: str) -> pa.Schema:
        with self._reader(name) as handle:
            return pq.read_schema(handle) if name.endswith(".parquet") else _read_jsonl(handle).schema

    def read_range(self, name: str, start: int, stop: int) -> pa.Table:
        """The file's rows with positions in [start, stop)."""
        with self._reader(name) as handle:
            if name.endswith(".parquet"):
                return pq.read_table(handle, filters=[(ROW_INDEX, ">=", start), (ROW_INDEX, "<", stop)])
            table = _read_jsonl(handle)
        positions = table.column(ROW_INDEX)
        return table.filter(pc.and_(pc.greater_equal(positions, start), pc.less(positions, stop)))

    def read_column(self, name: str, column: str) -> pa.ChunkedArray:
        with self._reader(name) as handle:
            table = pq.read_table(handle, columns=[column]) if name.endswith(".parquet") else _read_jsonl(handle)
        return table.column(column)

    def _fits(self, row: dict[str, Any]) -> bool:
        try:
            self._write_rows(io.BytesIO(), [row])
            return True
        except _UNWRITABLE:
            return False

    def _write_rows(self, handle: Any, rows: list[dict[str, Any]]) -> None:
        if self.format == "parquet":
            table = rows_to_table(rows, {**self.input_types, **self.result_types})
            if max(map(_parquet_levels, table.schema.types), default=0) > _PARQUET_MAX_LEVELS:
                raise ValueError("nested too deeply for Parquet")  # it writes such a file, then cannot read it
            # Statistics only where export filters, and dictionaries only for short values: with either,
            # one huge text cell (a 50 MB prompt) would be copied several times over.
            pq.write_table(table, handle, write_statistics=[ROW_INDEX], use_dictionary=_short_columns(table))
        else:
            if self.input_types:  # typed values (a timestamp read as its integer) as JSON can hold them
                rows = rows_to_table(rows, self.input_types).to_pylist()
            handle.writelines(json_line(row) for row in rows)

    def remove_except(self, committed: set[str]) -> None:
        """Delete our result and temporary files that the ledger does not list; nothing else."""
        with self._folder() as folder:
            leftovers = [entry.name for entry in os.scandir(folder)
                         if _ours(entry) and entry.name not in committed]
            for name in leftovers:
                os.unlink(name, dir_fd=folder)
            if leftovers:
                os.fsync(folder)

    def foreign(self) -> list[Path]:
        """What is in the folder that bulkinfer did not write (another name, a folder, a link), by name;
        nothing if there is no folder, the folder's own name if it is a file."""
        try:
            with self._folder() as folder:
                return sorted(self.directory / entry.name for entry in os.scandir(folder) if not _ours(entry))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return [self.directory]

    @contextmanager
    def _folder(self) -> Iterator[int]:
        folder = open_no_follow(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield folder
        finally:
            os.close(folder)

    def _reader(self, name: str) -> IO[bytes]:
        with self._folder() as folder:
            return read_no_follow(self.directory / name, dir_fd=folder)


def _ours(entry: os.DirEntry) -> bool:
    """A regular file (not a link, not a folder) under a name bulkinfer gives its files; or one that
    was there when listed and is gone (a run renamed its temporary file meanwhile)."""
    if not _OUR_FILE.fullmatch(entry.name):
        return False
    try:
        return stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return True


# What a row's values can make Arrow or the JSON encoder raise; a full disk is an OSError, not one of these.
_UNWRITABLE = (pa.ArrowException, UnicodeError, ValueError, TypeError, OverflowError, RecursionError)


def _unwritable(row: dict[str, Any]) -> dict[str, Any]:
    """The row reduced to its position and why: its values are what could not be written."""
    return {ROW_INDEX: row[ROW_INDEX], "error": f"row {row[ROW_INDEX]}: its values cannot be written as a result "
                                                 f"(text that is not valid Unicode, a value out of range, or nested too deeply)"}


_LONG_TEXT = 1 << 16  # bytes
_PARQUET_MAX_LEVELS = 100  # Arrow's Parquet reader refuses a schema nested deeper


def _parquet_levels(data_type: pa.DataType) -> int:
    """How many levels of a Parquet schema a column of this type takes: a struct one, a list two
    (its group and the repeated field), a map three, plus the column's root and its leaf."""
    if pa.types.is_struct(data_type):
        return 1 + max((_parquet_levels(data_type.field(i).type) for i in range(data_type.num_fields)), default=1)
    if pa.types.is_map(data_type):
        return 3 + max(_parquet_levels(data_type.key_type), _parquet_levels(data_type.item_type))
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) or pa.types.is_fixed_size_list(data_type):
        return 2 + _parquet_levels(data_type.value_type)
    return 2


def _short_columns(table: pa.Table) -> list[str]:
    """The columns whose values are not long texts or bytes."""
    return [field.name for field, column in zip(table.schema, table.columns)
            if not (pa.types.is_string(field.type) or pa.types.is_binary(field.type))
            or (pc.max(pc.binary_length(column)).as_py() or 0) <= _LONG_TEXT]


def rows_within(cells: int, columns: int) -> int:
    """The most rows whose values, `columns` to a row, fit in `cells` (at least one row)."""
    return max(1, cells // max(1, columns))


def file_digest(handle: IO[bytes]) -> str:
    """SHA-256 of what is left to read in `handle`, hex."""
    digest = hashlib.sha256()
    while chunk := handle.read(_READ_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _read_jsonl(handle: IO[bytes]) -> pa.Table:
    return rows_to_table([json.loads(line) for line in handle])
