"""The job's input files with their row counts, and one ordered stream of rows over all of them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from bulkinfer.runner import jsonl_reader, parquet_reader
from bulkinfer.runner.rows import SourceRow, reserved_columns
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import Source


@dataclass(frozen=True)
class InputFile:
    path: str
    format: str
    size: int
    mtime_ns: int
    rows: int

    @property
    def source(self) -> Source:
        return Source(Path(self.path), self.format)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def identity(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if key != "rows"}


def identity_of(source: Source) -> dict[str, Any]:
    """What says a file is unchanged: path, format, size and modification time."""
    stat = source.path.stat()
    return {"path": str(source.path), "format": source.format, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def scan_inputs(sources: list[Source]) -> list[InputFile]:
    """Stat and count every file; counting a JSONL file reads it once, which is cheap next to inference."""
    files = []
    for source in sources:
        reader = parquet_reader if source.format == "parquet" else jsonl_reader
        files.append(InputFile(**identity_of(source), rows=reader.count_rows(source.path)))
    return files


def read_rows(files: list[InputFile], done: RowSet, batch_rows: int,
              wanted: range | None = None, task: str = "generate") -> Iterator[SourceRow]:
    """Every row of `wanted` (default: all) not in `done`, in input order, numbered by position across all files.
    `task` says which column names the output needs for itself (see rows.reserved_columns)."""
    reserved = reserved_columns(task)
    skipped = _Skipped(done, wanted if wanted is not None else range(sum(file.rows for file in files)))
    start = 0
    for file in files:
        if not skipped.contains_all(start, start + file.rows):
            if file.format == "parquet":
                yield from parquet_reader.read_parquet(file.source, start, skipped, batch_rows)
            else:
                yield from jsonl_reader.read_jsonl(file.source, start, skipped, reserved)
        start += file.rows


class _Skipped:
    """The rows a read passes over without parsing them: those done, and those outside `wanted`.
    Offers the two RowSet methods the readers ask."""

    def __init__(self, done: RowSet, wanted: range) -> None:
        self.done = done
        self.wanted = wanted

    def __contains__(self, row: int) -> bool:
        return row not in self.wanted or row in self.done

    def contains_all(self, start: int, stop: int) -> bool:
        inside = range(max(start, self.wanted.start), min(stop, self.wanted.stop))
        return not inside or self.done.contains_all(inside.start, inside.stop)


def windows(rows: Iterable[SourceRow], size: int) -> Iterator[list[SourceRow]]:
    iterator = iter(rows)
    while window := list(islice(iterator, size)):
        yield window
