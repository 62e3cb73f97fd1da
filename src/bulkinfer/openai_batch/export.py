"""Export a finished batch job as an OpenAI batch output file, one line per request, in input order."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bulkinfer.openai_batch.responses import output_line
from bulkinfer.runner.durable import publish, sync_file
from bulkinfer.runner.export import ExportResult, export_job


def export_openai_batch(output: Path, destination: Path, partial: bool = False) -> ExportResult:
    """The job's rows through the runner's export (order, completeness), then mapped line by line."""
    created = int(time.time())
    with tempfile.TemporaryDirectory(dir=destination.parent) as scratch:
        rows_file = Path(scratch) / "rows.jsonl"
        result = export_job(output, rows_file, partial=partial)
        tmp = Path(scratch) / "out.jsonl"
        with open(rows_file, "rb") as rows, open(tmp, "wb") as out:
            for line in rows:
                out.write(json.dumps(output_line(json.loads(line), created)).encode() + b"\n")
            sync_file(out)
        publish(tmp, destination)
    return result
