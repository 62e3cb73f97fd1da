"""`bulkinfer export` and `bulkinfer status`: read a job's output directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from bulkinfer.cli.batch_format import check_format
from bulkinfer.cli.options import given_options, with_options
from bulkinfer.cli.run import run_settings
from bulkinfer.cli.summary import rows_done
from bulkinfer.errors import UsageError
from bulkinfer.openai_batch import export_openai_batch, is_batch_job
from bulkinfer.runner.config import json_object
from bulkinfer.runner.export import export_job
from bulkinfer.runner.pipeline.layout import is_pipeline
from bulkinfer.runner.pipeline.progress import export_pipeline, pipeline_status
from bulkinfer.runner.status import job_status, shards_left
from bulkinfer.runner.storage import is_remote
from bulkinfer.settings import Setting, expand_home


def store_settings() -> list[Setting]:
    """What reading a job's output on object storage takes: `run`'s own --storage-options."""
    return [s for s in run_settings() if s.name == "storage_options"]


def _storage_options(options: dict[str, Any]) -> dict[str, Any] | None:
    return json_object("storage_options", given_options(options, store_settings()).get("storage_options"))


def export_command(
    output: str = typer.Argument(..., help="The job's output directory (a path, or an s3:// or gs:// URL).",
                                 callback=expand_home),
    file: str = typer.Argument(..., help="Destination: .parquet, .jsonl, .jsonl.gz or .jsonl.zst; a local file "
                                         "or an object on a store (s3://bucket/key.parquet, gs://...).",
                               callback=expand_home),
    partial: bool = typer.Option(False, "--partial", help="Export the rows done so far of an unfinished job."),
    format: Optional[str] = typer.Option(None, "--format", show_default=False,
                                         help="rows (every column) or openai-batch (OpenAI Batch API output "
                                              "lines) (default: openai-batch for a job run with --format "
                                              "openai-batch, else rows)."),
    stage: Optional[str] = typer.Option(None, "--stage", show_default=False,
                                        help="For a pipeline's output directory: this stage's rows (default: "
                                             "the last stage's)."),
    **options: Any,
) -> int:
    if is_pipeline(output) or stage is not None:
        if format not in (None, "rows") or partial:
            raise UsageError("a pipeline exports its complete stages' rows: drop --format and --partial")
        if is_remote(file):
            raise UsageError(f"{file}: a pipeline exports to a local file; export it there, then copy it to the store")
        result = export_pipeline(Path(output), Path(file), stage)
    elif check_format(format or ("openai-batch" if is_batch_job(output) else "rows")) == "openai-batch":
        if is_remote(file):
            raise UsageError(f"{file}: an OpenAI batch output file is written to a local file; export it there, "
                             f"then copy it to the store")
        result = export_openai_batch(Path(output), Path(file), partial=partial)
    else:
        result = export_job(output, file, partial=partial, storage_options=_storage_options(options))
    print(f"bulkinfer: wrote {result.rows:,} rows ({result.rows_failed:,} with errors) to {file}", file=sys.stderr)
    return 0


def status_command(
    output: str = typer.Argument(..., help="The job's output directory (a path, or an s3:// or gs:// URL).",
                                 callback=expand_home),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a sentence."),
    verify: bool = typer.Option(False, "--verify", help="Also check every result file's bytes and rows against "
                                                        "the ledger (reads them all); exit 1 if any is damaged "
                                                        "(on object storage, damaged files are then voided, for "
                                                        "the next run to redo)."),
    **options: Any,
) -> int:
    """Result files are always checked for presence and size."""
    if is_pipeline(output):
        return _pipeline_status(Path(output), as_json, verify)
    status = job_status(output, verify=verify, storage_options=_storage_options(options))
    if as_json:
        print(json.dumps(status.to_json()))
    else:
        left = shards_left(status.num_shards, status.missing_shards, status.unfinished_shards)
        print(f"{status.state}: {rows_done(status)}{left}")
        for damage in status.damaged:
            print(f"  damaged: {damage}")
        for path in status.foreign:
            print(f"  not written by bulkinfer: {path} (runs refuse to start until it is moved away)")
        if status.damaged:
            print("  to repair: run the job again with the same command; it redoes exactly the rows of damaged files")
        elif verify:
            print("  every result file is as committed")
    return 1 if status.damaged else 0


def _pipeline_status(output: Path, as_json: bool, verify: bool) -> int:
    stages = pipeline_status(output, verify=verify)
    if as_json:
        print(json.dumps({"stages": [stage.to_json() for stage in stages]}))
    else:
        for number, stage in enumerate(stages, 1):
            job = stage.job
            rows = f": {rows_done(job)}" if job else ""
            print(f"stage {number} {stage.name}: {stage.state}{rows}")
            for damage in job.damaged if job else []:
                print(f"  damaged: {damage}")
    return 1 if any(stage.job and stage.job.damaged for stage in stages) else 0


with_options(export_command, store_settings())
with_options(status_command, store_settings())
