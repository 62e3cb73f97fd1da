"""`bulkinfer export` and `bulkinfer status`: read a job's output directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from bulkinfer.cli.batch_format import check_format
from bulkinfer.openai_batch import export_openai_batch
from bulkinfer.runner.export import export_job
from bulkinfer.runner.status import job_status, shards_left


def export_command(
    output: Path = typer.Argument(..., help="The job's output directory."),
    file: Path = typer.Argument(..., help="Destination: .parquet, .jsonl, .jsonl.gz or .jsonl.zst."),
    partial: bool = typer.Option(False, "--partial", help="Export the rows done so far of an unfinished job."),
    format: str = typer.Option("rows", "--format", help="rows (every column) or openai-batch (OpenAI Batch API "
                                                        "output lines, for a job run with --format openai-batch)."),
) -> int:
    if check_format(format) == "openai-batch":
        result = export_openai_batch(output, file, partial=partial)
    else:
        result = export_job(output, file, partial=partial)
    print(f"bulkinfer: wrote {result.rows:,} rows ({result.rows_failed:,} with errors) to {file}", file=sys.stderr)
    return 0


def status_command(
    output: Path = typer.Argument(..., help="The job's output directory."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a sentence."),
) -> int:
    status = job_status(output)
    if as_json:
        print(json.dumps(status.to_json()))
    else:
        left = shards_left(status.num_shards, status.missing_shards, status.unfinished_shards)
        print(f"{status.state}: {status.rows_done:,} of {status.rows_total:,} rows done, "
              f"{status.rows_failed:,} with errors{left}")
    return 0

