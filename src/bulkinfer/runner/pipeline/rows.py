"""The rows that flow between stages, a bounded batch at a time, never a whole stage: the pipeline's
input read in windows, a stage's committed results read back in row order a chunk at a time, and the
input table a model stage's job reads, with the identities that make a stage's cache key.

A stage's input table is written into the stage's own directory (the job's input table, as an OpenAI
batch job keeps its requests). Its modification time is set from the identity of what it holds (the
input stage's job id and committed file checksums, or the pipeline input's files, and the stage's
template), so the job's fingerprint, which names its input files by size and modification time, is the
same on every run with the same upstream results, and changes whenever they change.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

from bulkinfer.durable import publish, sync_file
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.export import committed_rows
from bulkinfer.runner.outdir.ledger import job_id, load_progress
from bulkinfer.runner.outdir.row_tables import json_line
from bulkinfer.runner.readers import read_rows
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import identity_of, resolve_sources, scan_inputs
from bulkinfer.runner.pipeline.transforms import ERROR, SOURCE_ROW, Batches, Row

# Why a row could not be sent to a stage's model (an unreadable input line, a template's missing
# column): it goes into the input table and becomes the row's error in the stage's output.
PIPELINE_ERROR = "pipeline_error"
_READ_WINDOW = 10_000
_EPOCH_2001_NS = 978_307_200 * 10**9  # identities become modification times after this, well within any filesystem's


def identity(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def input_identity(inputs: list[str], input_format: str | None) -> str:
    """The pipeline input's files, as a job identifies its inputs: path, format, size, modification time."""
    return identity([identity_of(source) for source in resolve_sources(inputs, input_format)])


def results_identity(stage_dir: Path) -> str:
    """A model stage's committed results: its job's id and each committed file's checksum, in ledger order."""
    progress = load_progress(stage_dir / "ledger.jsonl")
    job = job_id(progress.job["fingerprint"]) if progress.job else None
    return identity(job, [(commit.file, commit.digest) for commit in progress.files])


def read_input(inputs: list[str], input_format: str | None) -> Batches:
    """The pipeline input's rows, in order, a window at a time, each with its source_row (its position)
    unless it has one; a row that cannot be read carries its reason, to become the first stage's error row."""
    files = scan_inputs(resolve_sources(inputs, input_format))
    batch: list[Row] = []
    for source in read_rows(files, RowSet(), _READ_WINDOW, reserved=()):
        if source.values is None or source.error is not None:
            batch.append({SOURCE_ROW: source.index, PIPELINE_ERROR: f"{source.where}: {source.error}"})
        else:
            batch.append({SOURCE_ROW: source.index, **source.values})
        if len(batch) == _READ_WINDOW:
            yield batch
            batch = []
    if batch:
        yield batch


def read_results(stage_dir: Path) -> Batches:
    """A complete model stage's rows in input order, a chunk at a time, as export reads them (every file
    checked against the ledger); a row that failed before its model ran gets that reason as its error.
    The error column is always there."""
    # Columns no row has a value in (a generation's reasoning, tool calls) are left out, as export leaves
    # them out of a JSONL file: known only after reading every row once.
    shown = _columns_with_values(stage_dir)
    for table in committed_rows(stage_dir).tables:
        rows = table.select([name for name in table.column_names if name in shown]).to_pylist()
        for row in rows:
            row.pop(ROW_INDEX, None)
            reason = row.pop(PIPELINE_ERROR, None)
            row[ERROR] = reason if reason is not None else row.get(ERROR)
        yield rows


def _columns_with_values(stage_dir: Path) -> set[str]:
    shown: set[str] = set()
    for table in committed_rows(stage_dir).tables:
        shown.update(name for name in table.column_names
                     if name not in shown and table.column(name).null_count < table.num_rows)
    return shown


def without(rows: list[Row], columns: tuple[str, ...]) -> list[Row]:
    """The rows without `columns`: a later stage's task writes those itself, and its results replace them."""
    dropped = set(columns)
    return [{key: value for key, value in row.items() if key not in dropped} for row in rows]


def write_table(path: Path, batches: Callable[[], Batches], content: str) -> None:
    """The stage's input table, unless the one there already holds `content` (its modification time says).
    `batches()` gives the rows afresh: once for the columns (every line has the same keys, since columns_of
    samples lines), once to write them, so no more than a batch is held."""
    if table_is_current(path, content):
        return
    columns = list(dict.fromkeys(key for batch in batches() for row in batch for key in row))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        for batch in batches():
            out.write(b"".join(json_line({column: row.get(column) for column in columns}) for row in batch))
        sync_file(out)
    os.utime(tmp, ns=(_mtime_ns(content), _mtime_ns(content)))
    publish(tmp, path)


def table_is_current(path: Path, content: str) -> bool:
    return path.is_file() and path.stat().st_mtime_ns == _mtime_ns(content)


def _mtime_ns(content: str) -> int:
    return _EPOCH_2001_NS + int(content[:15], 16)
