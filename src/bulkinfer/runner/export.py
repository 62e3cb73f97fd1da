"""Write a job's results, every row once and in input order, to one Parquet or JSONL file.

Result files hold rows in the order they finished, so export walks the row positions in chunks and,
for each chunk, reads only the files whose span overlaps it: memory stays bounded by a chunk and a
few files, however large the job, and a chunk holds only the columns with a value, however many
distinct keys the rows have. What is written depends on the committed rows alone, not on how they
were split into files. Every file is first checked against the ledger (size, SHA-256,
rows), and the rows written are counted against the ledger's: damaged results are never exported.

The destination is a local file or an object on a store (s3://, gs://); either appears only once the
export is complete and counted (destination.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.destination import export_destination, export_object_destination, writing, writing_object
from bulkinfer.runner.outdir.ledger import Commit
from bulkinfer.runner.outdir.result_files import ResultFiles, rows_within
from bulkinfer.runner.outdir.row_tables import fits, json_line, narrowed, unified_schema, widened
from bulkinfer.runner.readers import compression_of
from bulkinfer.runner.sources import COMPRESSION_SUFFIXES, suffix_format
from bulkinfer.runner.status import JobUnion, find_damage, load_union, shards_left, store_errors_at
from bulkinfer.runner.storage import is_remote
from bulkinfer.runner.tasks import declared_types, result_columns

CHUNK_ROWS = 10_000  # rows per ordered slice; with the files it overlaps, what export holds at once
CHUNK_CELLS = 4_000_000  # values read at once: fewer rows when the rows have many columns (distinct JSONL keys)
JSONL_CELLS = 200_000  # values turned into Python objects at once when writing JSONL


@dataclass(frozen=True)
class ExportResult:
    rows: int
    rows_failed: int
    rows_total: int


@dataclass(frozen=True)
class CommittedRows:
    """A job's committed rows, every file checked against the ledger first."""
    union: JobUnion
    schema: pa.Schema  # every committed file fits it
    tables: Iterator[pa.Table]  # in row order, a chunk at a time; raises at the end unless the ledger's count


def export_job(output: Path | str, destination: Path | str, partial: bool = False, chunk_rows: int = CHUNK_ROWS,
               storage_options: dict[str, Any] | None = None) -> ExportResult:
    """`output`: the job's directory, local or on object storage; `destination`: a local file, or a store's
    URL; `storage_options`: fsspec's options for the store(s)."""
    remote = is_remote(str(destination))
    destination = (export_object_destination(str(destination), storage_options) if remote
                   else export_destination(Path(destination)))
    name = str(destination).rsplit("/", 1)[-1]
    fmt = _destination_format(destination, name)
    committed = committed_rows(output, partial, chunk_rows, storage_options)
    if remote:
        with writing_object(destination, storage_options) as file:
            rows = _write(file, fmt, compression_of(name), committed.schema, committed.tables)
    else:
        with writing(destination) as tmp:
            rows = _write(tmp, fmt, compression_of(name), committed.schema, committed.tables)
            os.replace(tmp, destination)
    return ExportResult(rows, committed.union.rows_failed, committed.union.rows_total)


def committed_rows(output: Path | str, partial: bool = False, chunk_rows: int = CHUNK_ROWS,
                   storage_options: dict[str, Any] | None = None) -> CommittedRows:
    """The job's rows in order, `chunk_rows` at a time, after checking every file against the ledger: what
    export writes, for a reader that streams them (a pipeline's next stage)."""
    with store_errors_at(output):
        union = load_union(output, storage_options)
        _check_exportable(output, union, partial)
        spans = list(union.result_files())
        schema = _job_schema(spans, union.task)
    tables = _counted(output, union, _read_from(output, _chunks(spans, schema, chunk_rows)))
    return CommittedRows(union, schema, tables)


def _counted(output: Path | str, union: JobUnion, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """`tables`, then an error unless they held the rows the ledger lists: raised before a writer publishes."""
    rows = 0
    for table in tables:
        rows += table.num_rows
        yield table
    if rows != union.rows_done:
        raise RunError(f"{output}: {rows:,} rows were read from its result files, where its ledger lists "
                       f"{union.rows_done:,}; nothing was exported")


def _check_exportable(output: Path | str, union: JobUnion, partial: bool) -> None:
    damage = find_damage(union, full=True)
    if damage:
        others = f" and {len(damage) - 1} more" if len(damage) > 1 else ""
        raise RunError(f"{damage[0].describe()}{others}: damaged results are not exported; run the job again "
                       f"(it redoes exactly those rows), then export")
    if union.rows_done < union.rows_total and not partial:
        left = shards_left(union.num_shards, union.missing, union.unfinished)
        then = "it is still running: wait for it to finish" if union.running() else "run it again to finish it"
        raise UsageError(f"{output}: the job is not complete ({union.rows_done:,} of {union.rows_total:,} rows{left}); "
                         f"{then}, or pass --partial to export what is done")


def _destination_format(destination: Path | str, name: str) -> str:
    fmt = suffix_format(name)
    if fmt is None:
        raise UsageError(f"{destination}: name it .parquet or .jsonl (optionally .jsonl.gz or .jsonl.zst)")
    if fmt == "parquet" and name.lower().endswith(COMPRESSION_SUFFIXES):
        raise UsageError(f"{destination}: Parquet compresses internally; name it .parquet")
    return fmt


def _job_schema(spans: list[tuple[ResultFiles, Commit]], task: str) -> pa.Schema:
    """The schema every committed file fits into. A column that some file's values cannot take the common
    type of (an int beyond 2**53 where another file holds floats) is text, as if those rows had shared a file."""
    schemas = [files.schema(span.file) for files, span in spans]
    schema = unified_schema(schemas, result_columns(task), declared_types(task))
    for (files, span), own in zip(spans, schemas):
        for field in own:
            index = schema.get_field_index(field.name)
            target = schema.field(index).type
            if field.type != target and target != pa.string() and not fits(files.read_column(span.file, field.name),
                                                                          target):
                schema = schema.set(index, pa.field(field.name, pa.string()))
    return schema


def _read_from(output: Path | str, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """`tables`, read from the job at `output`, whose store failing is one line (a full disk here is not)."""
    with store_errors_at(output):
        yield from tables


def _chunks(spans: list[tuple[ResultFiles, Commit]], schema: pa.Schema, chunk_rows: int) -> Iterator[pa.Table]:
    """The job's rows in order, `chunk_rows` positions at a time, each slice read in ranges small enough
    that a range's rows, with every column their files have, stay within CHUNK_CELLS values."""
    end = max((span.last + 1 for _, span in spans), default=0)
    step = min(chunk_rows, rows_within(CHUNK_CELLS, len(schema)))
    for start in range(0, end, chunk_rows):
        ranges = [_range(spans, schema, low, min(low + step, start + chunk_rows))
                  for low in range(start, min(start + chunk_rows, end), step)]
        ranges = [table for table in ranges if table is not None]
        if ranges:
            yield widened(ranges, schema)
            # Arrow's default allocator (mimalloc) keeps freed slices for reuse, which lets the peak
            # creep up with the number of slices; handing them back keeps it flat (measured: +8% -> +2%).
            pa.default_memory_pool().release_unused()


def _range(spans: list[tuple[ResultFiles, Commit]], schema: pa.Schema, start: int, stop: int) -> pa.Table | None:
    """The rows at positions [start, stop), in order, with only the columns that hold a value."""
    parts = [narrowed(files.read_range(span.file, start, stop), schema)
             for files, span in spans if span.first < stop and span.last >= start]
    if not parts:
        return None
    table = pa.concat_tables(parts, promote_options="default").sort_by(ROW_INDEX)
    _check_unique(table)
    return table


def _check_unique(table: pa.Table) -> None:
    """Exactly once is the job's promise; a repeated row here would mean the ledger was tampered with."""
    positions = table.column(ROW_INDEX)
    if len(positions) > 1 and not pc.all(pc.greater(positions[1:], positions[:-1])).as_py():
        raise RunError("a row appears twice among the committed result files: the ledger was changed by something "
                       "other than bulkinfer; nothing was exported")


def _write(sink: Path | IO[bytes], fmt: str, compression: str | None, schema: pa.Schema,
           tables: Iterator[pa.Table]) -> int:
    rows = 0
    sink = str(sink) if isinstance(sink, Path) else sink
    if fmt == "parquet":
        with pq.ParquetWriter(sink, schema) as writer:
            for table in tables:
                writer.write_table(table)
                rows += table.num_rows
        return rows
    with pa.output_stream(sink, compression=compression) as stream:
        for table in tables:
            _write_jsonl(stream, table)
            rows += table.num_rows
    return rows


def _write_jsonl(stream: IO[bytes], table: pa.Table) -> None:
    rows = rows_within(JSONL_CELLS, table.num_columns)
    for start in range(0, table.num_rows, rows):
        stream.write(b"".join(json_line(row) for row in table.slice(start, rows).to_pylist()))
