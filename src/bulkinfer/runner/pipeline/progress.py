"""How far a pipeline is, stage by stage, and its output written to one file: what `bulkinfer status`
and `bulkinfer export` do with a pipeline's output directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bulkinfer.errors import UsageError
from bulkinfer.runner.destination import export_destination, writing
from bulkinfer.runner.export import ExportResult
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.outdir.row_tables import json_line
from bulkinfer.runner.pipeline.layout import read_record
from bulkinfer.runner.pipeline.run import Pipeline
from bulkinfer.runner.pipeline.transforms import is_sound
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
    """The last stage's rows (or `stage`'s) to a .parquet or .jsonl file."""
    destination = export_destination(destination)
    rows = open_pipeline(output).rows(stage)
    fmt = suffix_format(destination.name)
    if fmt is None:
        raise UsageError(f"{destination}: name it .parquet or .jsonl (optionally .jsonl.gz or .jsonl.zst)")
    with writing(destination) as tmp:
        if fmt == "parquet":
            pq.write_table(_table(rows, destination), tmp)
        else:
            with pa.output_stream(str(tmp), compression="detect") as stream:
                for row in rows:
                    stream.write(json_line(row))
        os.replace(tmp, destination)
    failed = sum(not is_sound(row) for row in rows)
    return ExportResult(len(rows), failed, len(rows))


def _table(rows: list[dict[str, Any]], destination: Path) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # a column with values of several types across rows
        raise UsageError(f"{destination}: the rows do not fit one Parquet schema ({exc}); export to .jsonl "
                         f"instead") from None


def open_pipeline(output: Path) -> Pipeline:
    output = output.expanduser()
    return Pipeline.from_record(output, read_record(output))


def _current(pipeline: Pipeline, index: int) -> bool:
    """Whether the stage's results are of its input as it is now; unknown (an earlier stage unfinished) is not."""
    try:
        return pipeline.input_current(index)
    except (UsageError, OSError):
        return False
