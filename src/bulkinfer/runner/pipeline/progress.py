"""How far a pipeline is, stage by stage, and its output written to one file: what `bulkinfer status`
and `bulkinfer export` do with a pipeline's output directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from bulkinfer.errors import UsageError
from bulkinfer.runner.destination import export_destination, writing
from bulkinfer.runner.export import ExportResult
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.outdir.row_tables import json_line
from bulkinfer.runner.pipeline.layout import read_record
from bulkinfer.runner.pipeline.run import Pipeline
from bulkinfer.runner.pipeline.transforms import Batches, is_sound
from bulkinfer.runner.sources import suffix_format
from bulkinfer.runner.status import JobStatus, job_status


@dataclass(frozen=True)
class StageStatus:
    name: str
    state: str  # a job's state, or "not started", "out of date" (its input changed), "transform"
    job: JobStatus | None

    def to_json(self) -> dict[str, Any]:
        return {**(self.job.to_json() if self.job else {}), "stage": self.name, "state": self.state}


def pipeline_status(output: Path, verify: bool = False) -> list[StageStatus]:
    pipeline = open_pipeline(output)
    found = []
    for index, stage in enumerate(pipeline.stages):
        directory = pipeline.directory(index)
        if not stage.has_model:
            found.append(StageStatus(stage.name, "transform", None))
        elif not directory.is_dir() or not JobDir(directory).siblings():
            found.append(StageStatus(stage.name, "not started", None))
        else:
            status = job_status(directory, verify=verify)
            found.append(StageStatus(stage.name, status.state if _current(pipeline, index) else "out of date", status))
    return found


def export_pipeline(output: Path, destination: Path, stage: str | None = None) -> ExportResult:
    """The last stage's rows (or `stage`'s) to a .parquet or .jsonl file, streamed a batch at a time."""
    destination = export_destination(destination)
    pipeline = open_pipeline(output)
    pipeline.batches(stage)  # an unfinished or out-of-date stage: refused before anything is written
    fmt = suffix_format(destination.name)
    if fmt is None:
        raise UsageError(f"{destination}: name it .parquet or .jsonl (optionally .jsonl.gz or .jsonl.zst)")
    with writing(destination) as tmp:
        if fmt == "parquet":
            rows, failed = _write_parquet(lambda: pipeline.batches(stage), tmp, destination)
        else:
            rows, failed = _write_jsonl(pipeline.batches(stage), tmp)
        os.replace(tmp, destination)
    return ExportResult(rows, failed, rows)


def _write_jsonl(batches: Batches, tmp: Path) -> tuple[int, int]:
    rows = failed = 0
    with pa.output_stream(str(tmp), compression="detect") as stream:
        for batch in batches:
            stream.write(b"".join(json_line(row) for row in batch))
            rows, failed = rows + len(batch), failed + sum(not is_sound(row) for row in batch)
    return rows, failed


def _write_parquet(batches: Callable[[], Batches], tmp: Path, destination: Path) -> tuple[int, int]:
    """Two passes over the rows: the first finds the schema every batch fits, the second writes them."""
    schema = _schema(batches(), destination)
    rows = failed = 0
    with pq.ParquetWriter(str(tmp), schema) as writer:
        for batch in batches():
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            rows, failed = rows + len(batch), failed + sum(not is_sound(row) for row in batch)
    return rows, failed


def _schema(batches: Batches, destination: Path) -> pa.Schema:
    """The schema of all the rows, as one table of them all would have it, found a batch at a time."""
    schema = pa.schema([])
    try:
        for batch in batches:
            schema = pa.unify_schemas([schema, pa.Table.from_pylist(batch).schema], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # a column with values of several types across rows
        raise UsageError(f"{destination}: the rows do not fit one Parquet schema ({exc}); export to .jsonl "
                         f"instead") from None
    return schema


def open_pipeline(output: Path) -> Pipeline:
    output = output.expanduser()
    return Pipeline.from_record(output, read_record(output))


def _current(pipeline: Pipeline, index: int) -> bool:
    """Whether the stage's results are of its input as it is now; unknown (an earlier stage unfinished) is not."""
    try:
        return pipeline.input_current(index)
    except (UsageError, OSError):
        return False
