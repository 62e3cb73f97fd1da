"""Reading a job's input files as one ordered stream of rows, a Parquet record batch or a JSONL line
at a time, so that a dataset is never loaded whole.

A row's position in that stream, counted from 0 across the files in order, is its identity across
runs. A row that cannot be read (not JSON, not Unicode, nested too deeply) becomes an error row; a
file that cannot be read at all is the user's to repair, said in one line.

A file on object storage is streamed a block at a time, as a local one is read (runner/storage.py).

Each file is read as the job recorded it at the start: a file whose size or modification time (on a
store: its version) has changed since is refused (check_unchanged), and a read never goes past the
file's recorded rows, so lines appended to a file being read are not taken for rows of the job.
"""

from __future__ import annotations

import io
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from stat import S_ISREG
from typing import IO, Any, Iterable, Iterator, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.columns import reserved_clash
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.storage import is_remote, object_identity, open_object, store_errors

READ_BUFFER = 1 << 20


@dataclass(frozen=True)
class Source:
    path: str  # an absolute local path, or a store's URL (s3://bucket/key)
    format: str  # "parquet" | "jsonl"
    storage_options: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class InputFile:
    """An input file as the job recorded it at the start, with its number of rows. A local file is known by
    its modification time, an object on a store by its version (mtime_ns None there, version None here)."""

    path: str
    format: str
    size: int
    rows: int
    mtime_ns: int | None = None
    version: str | None = None
    storage_options: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # never stored

    @property
    def source(self) -> Source:
        return Source(self.path, self.format, self.storage_options)

    def to_json(self) -> dict[str, Any]:
        return {key: value for key in _RECORDED if (value := getattr(self, key)) is not None}

    def identity(self) -> dict[str, Any]:
        return {key: value for key, value in self.to_json().items() if key != "rows"}

    def change(self) -> str | None:
        """How the file differs from when the job recorded it, or None. Size and modification time (or
        version) are what tell a rerun that its input is the same (the job's fingerprint), so a run tells
        the same way."""
        if self.version is not None:
            return self._object_change()
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return "was deleted"
        except OSError as exc:
            return f"can no longer be read ({exc.strerror})"
        if not S_ISREG(stat.st_mode):
            return "was replaced by something that is not a file"
        if stat.st_size != self.size:
            grew = stat.st_size > self.size
            return f"{'grew' if grew else 'shrank'} from {self.size:,} to {stat.st_size:,} bytes"
        if stat.st_mtime_ns != self.mtime_ns:
            return "was modified (its size is the same, its modification time is not)"
        return None

    def _object_change(self) -> str | None:
        found = object_identity(self.path, self.storage_options)
        if found is None:
            return "was deleted"
        size, version = found
        if size != self.size:
            return f"{'grew' if size > self.size else 'shrank'} from {self.size:,} to {size:,} bytes"
        if version != self.version:
            return f"was written again (its version was {self.version}, it is {version})"
        return None


_RECORDED = ("path", "format", "size", "mtime_ns", "version", "rows")  # what job.json keeps of an InputFile


def check_unchanged(files: Iterable[InputFile]) -> None:
    """Raises RunError for the first file that is not as the job recorded it: rows read from it now
    may not be the rows the job counted (a row's position is its identity)."""
    for file in files:
        change = file.change()
        if change is not None:
            raise _changed(file, change)


def _changed(file: InputFile, change: str) -> RunError:
    restore = ("Put the object back as it was (the store's version history may hold it)" if file.version
               else "Put the file back as it was, bytes and modification time (as cp -p restores them),")
    return RunError(f"{file.path}: {change} since the job started; this run stops without committing more "
                    f"(what it committed is kept). {restore} to go on; or rerun with --force or another --output "
                    f"to start over with the new data")


@dataclass
class SourceRow:
    index: int
    values: dict[str, Any] | None  # the input columns; None when the row could not be read as an object
    where: str  # names the row for a person: "data.jsonl line 17", "part-0.parquet row 5"
    error: str | None = None  # why the row cannot run, when that is known from reading alone


class RowsToSkip(Protocol):
    """Rows a read passes over without parsing them (a RowSet is one)."""

    def __contains__(self, row: int) -> bool: ...

    def contains_all(self, start: int, stop: int) -> bool: ...


def read_rows(files: list[InputFile], done: RowSet, batch_rows: int, wanted: range | None = None,
              *, reserved: tuple[str, ...]) -> Iterator[SourceRow]:
    """Every row of `wanted` (default: all) not in `done`, in input order, numbered by position across
    all files. `reserved`: the column names the output needs for itself (tasks.reserved_columns)."""
    skipped = _Skipped(done, wanted if wanted is not None else range(sum(file.rows for file in files)))
    start = 0
    for file in files:
        if not skipped.contains_all(start, start + file.rows):
            with _as_recorded(file):
                if file.format == "parquet":
                    yield from _read_parquet(file, start, skipped, batch_rows)
                else:
                    yield from _read_jsonl(file, start, skipped, reserved)
        start += file.rows


def windows(rows: Iterable[SourceRow], size: int) -> Iterator[list[SourceRow]]:
    iterator = iter(rows)
    while window := list(islice(iterator, size)):
        yield window


class _Skipped:
    """The rows a read passes over: those done, and those outside `wanted`."""

    def __init__(self, done: RowSet, wanted: range) -> None:
        self.done = done
        self.wanted = wanted

    def __contains__(self, row: int) -> bool:
        return row not in self.wanted or row in self.done

    def contains_all(self, start: int, stop: int) -> bool:
        inside = range(max(start, self.wanted.start), min(stop, self.wanted.stop))
        return not inside or self.done.contains_all(inside.start, inside.stop)


def count_rows(source: Source) -> int:
    """Rows the file will yield: Parquet's row count, or the JSONL file's non-blank lines. Reading a JSONL
    file to its end here finds a damaged one (a cut .gz) before the job starts."""
    if source.format == "parquet":
        return _parquet(source).metadata.num_rows
    with _reading(source), _open_lines(source) as lines:
        return sum(1 for raw in lines if not _blank(raw))


def columns_of(source: Source) -> set[str] | None:
    """Parquet: the schema's names. JSONL: the keys of the first objects; None when none of its first lines parses."""
    if source.format == "parquet":
        names = _parquet(source).schema_arrow.names
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            raise UsageError(f"{source.path}: has two columns named {twice!r}; a job reads columns by name, "
                             f"so rename one")
        return set(names)
    with _reading(source):
        return _sample_keys(source)


def input_types(files: list[InputFile]) -> dict[str, pa.DataType]:
    """The Arrow type of each column of the Parquet inputs, for result files to keep: the first file's
    where files differ."""
    types: dict[str, pa.DataType] = {}
    for file in files:
        if file.format == "parquet":
            for field in _parquet(file.source).schema_arrow:
                types.setdefault(field.name, field.type)
    return types


@contextmanager
def _as_recorded(file: InputFile) -> Iterator[None]:
    """Reading `file`, which must be as recorded: a failure to read it, when the file has changed
    meanwhile, is said as that change."""
    check_unchanged([file])
    try:
        with store_errors(file.path):
            yield
    except (pa.ArrowException, OSError, EOFError, UsageError):
        check_unchanged([file])
        raise


def _rows_differ(file: InputFile, found: int) -> RunError:
    return _changed(file, file.change() or f"holds {found:,} rows where the job recorded {file.rows:,}")


def _read_parquet(file: InputFile, start: int, skip: RowsToSkip, batch_rows: int) -> Iterator[SourceRow]:
    """Rows numbered from `start`; a record batch whose rows are all skipped is not even converted."""
    source, index = file.source, start
    parquet = _parquet(source)
    if parquet.metadata.num_rows != file.rows:
        raise _rows_differ(file, parquet.metadata.num_rows)
    for batch in parquet.iter_batches(batch_size=batch_rows):
        stop = index + batch.num_rows
        if not skip.contains_all(index, stop):
            for offset, (values, problem) in enumerate(_batch_rows(batch)):
                row = index + offset
                if row not in skip:
                    where = f"{source.name} row {row - start + 1}"
                    yield SourceRow(row, values, where, f"{where}: {problem}" if problem else None)
        index = stop


def _batch_rows(batch: pa.RecordBatch) -> list[tuple[dict | None, str | None]]:
    """Each row's values, or why it has none: a file written by another tool may hold text that is not
    UTF-8, which fails only its own row. Dates, times and timestamps come as their integers, which
    result files turn back into the input's own type (see input_types): Python's datetime would drop
    nanoseconds."""
    batch = pa.RecordBatch.from_arrays([_exact(column) for column in batch.columns], schema=_exact_schema(batch.schema))
    try:
        return [(values, None) for values in batch.to_pylist()]
    except (UnicodeDecodeError, pa.ArrowException):
        return [_one_row(batch, offset) for offset in range(batch.num_rows)]


def _one_row(batch: pa.RecordBatch, offset: int) -> tuple[dict | None, str | None]:
    try:
        return batch.slice(offset, 1).to_pylist()[0], None
    except UnicodeDecodeError:
        return None, "a text column holds bytes that are not valid UTF-8"
    except pa.ArrowException as exc:
        return None, f"cannot be read ({exc})"


def _exact(column: pa.Array) -> pa.Array:
    return column.view(_STORAGE[column.type.bit_width]) if _temporal(column.type) else column


def _exact_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_type(_STORAGE[field.type.bit_width]) if _temporal(field.type) else field
                      for field in schema])


def _temporal(data_type: pa.DataType) -> bool:
    return pa.types.is_temporal(data_type) and data_type.bit_width in _STORAGE


_STORAGE = {32: pa.int32(), 64: pa.int64()}


def _read_jsonl(file: InputFile, start: int, skip: RowsToSkip, reserved: tuple[str, ...]) -> Iterator[SourceRow]:
    """Rows numbered from `start` up to the file's recorded rows, skipped ones not even parsed; a row
    with a key in `reserved` (a name the output needs) becomes an error row."""
    index, stop = start, start + file.rows
    with _open_lines(file.source) as lines:
        for line_no, raw in enumerate(lines, 1):
            if index == stop:
                return  # lines appended since the job started are not its rows
            if _blank(raw):
                continue
            if index not in skip:
                text, problem = _decoded(raw)
                del raw  # so that a huge line is held once, as text, while it parses
                yield _parse_line(text, problem, index, f"{file.source.name} line {line_no}", reserved)
            index += 1
    if index < stop:
        raise _rows_differ(file, index - start)


def _parse_line(text: str | None, problem: str | None, index: int, where: str,
                reserved: tuple[str, ...]) -> SourceRow:
    value, problem = _load_object(text) if text is not None else (None, problem)
    if value is not None and (clash := reserved_clash(value.keys(), reserved)):
        value, problem = None, f"has a key {clash!r}, which is also an output column"
    return SourceRow(index, value, where, f"{where}: {problem}" if problem else None)


def _decoded(raw: bytes) -> tuple[str | None, str | None]:
    try:
        return raw.decode("utf-8").removeprefix("\ufeff"), None
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"


def _load_object(text: str) -> tuple[dict | None, str | None]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return None, "nested too deeply to read"
    except ValueError as exc:  # an integer of more digits than Python converts, say
        return None, f"not readable JSON ({exc})"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {_json_kind(value)}"
    # Raw UTF-8 cannot encode a lone surrogate, but a \ud800 escape can: such text breaks the tokenizer
    # and every writer, so the row stops here.
    if "\\u" in text and _has_lone_surrogate(value):
        return None, "holds a lone surrogate (a \\ud800-\\udfff escape): text that is not valid Unicode"
    return value, None


def _blank(raw: bytes) -> bool:
    return not raw or raw.isspace()  # not raw.strip(): that would copy a huge line


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _json_kind(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _open_lines(source: Source) -> IO[bytes]:
    """A binary line iterator; the decompressor is the one the extension names (.gz, .zst, ...)."""
    if not is_remote(source.path):
        return io.BufferedReader(pa.input_stream(source.path, compression="detect"), READ_BUFFER)
    stream = pa.input_stream(open_object(source.path, source.storage_options), compression=compression_of(source.name))
    return io.BufferedReader(stream, READ_BUFFER)


def compression_of(name: str) -> str | None:
    """The codec a file name's extension names, as pyarrow's "detect" picks it for a local path: a store's
    object comes as a file object, which it cannot name."""
    return _COMPRESSION.get(name.rsplit(".", 1)[-1].lower())


_COMPRESSION = {"gz": "gzip", "bz2": "bz2", "zst": "zstd", "zstd": "zstd", "lz4": "lz4"}


def _parquet(source: Source) -> pq.ParquetFile:
    """The file's footer read; its row groups are read when iterated."""
    with _reading(source):
        if is_remote(source.path):
            return pq.ParquetFile(open_object(source.path, source.storage_options))
        return pq.ParquetFile(source.path)


@contextmanager
def _reading(source: Source) -> Iterator[None]:
    """A file that cannot be read (cut short, not of its format, a damaged compressed stream) is the
    user's to repair or remove: one line, not a traceback."""
    try:
        with store_errors(source.path):
            yield
    except (pa.ArrowException, OSError, EOFError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # a machine's error (EIO, ENOENT ...), not the file's content
        raise UsageError(f"{source.path}: cannot be read as {source.format} ({exc}); the file is damaged or not "
                         f"{source.format}: repair or remove it") from None


def _sample_keys(source: Source, max_objects: int = 100) -> set[str] | None:
    keys: set[str] = set()
    found = 0
    with _open_lines(source) as lines:
        for raw in lines:
            if found >= max_objects:
                break
            text = None if _blank(raw) else _decoded(raw)[0]
            value = _load_object(text)[0] if text is not None else None
            if value is not None:
                keys.update(value)
                found += 1
    return keys if found else None
