"""The job's input files with their row counts, and one ordered stream of rows over all of them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Iterable, Iterator

from bulkinfer.runner import jsonl_reader, parquet_reader
from bulkinfer.runner.rows import SourceRow
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
              wanted: range | None = None) -> Iterator[SourceRow]:
    """Every row of `wanted` (default: all) not in `done`, in input order, numbered by position across all files."""
    wanted = wanted if wanted is not None else range(sum(file.rows for file in files))
    start = 0
    for file in files:
        stop = start + file.rows
        if start < wanted.stop and stop > wanted.start and not done.contains_all(start, stop):
            yield from (row for row in _read_file(file, start, done, batch_rows) if row.index in wanted)
        start = stop


def _read_file(file: InputFile, start: int, done: RowSet, batch_rows: int) -> Iterator[SourceRow]:
    if file.format == "parquet":
        return parquet_reader.read_parquet(file.source, start, done, batch_rows)
    return jsonl_reader.read_jsonl(file.source, start, done)


def windows(rows: Iterable[SourceRow], size: int) -> Iterator[list[SourceRow]]:
    iterator = iter(rows)
    while window := list(islice(iterator, size)):
        yield window
