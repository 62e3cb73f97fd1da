"""Export a finished batch job as an OpenAI batch output file, one line per request, in input order."""

from __future__ import annotations

import functools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bulkinfer.durable import publish, sync_file
from bulkinfer.engine.tokenizer import load_tokenizer
from bulkinfer.openai_batch.convert import requests_path
from bulkinfer.openai_batch.logprobs import Decode
from bulkinfer.openai_batch.responses import output_line
from bulkinfer.runner.destination import export_destination, writing
from bulkinfer.runner.export import ExportResult, export_job
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.status import job_root


def export_openai_batch(output: Path, destination: Path, partial: bool = False) -> ExportResult:
    """The job's rows through the runner's export (order, completeness), then mapped line by line."""
    output, destination = job_root(output), export_destination(destination)
    created = int(time.time())
    decode = _lazy_decoder(output)
    with writing(destination) as tmp, tempfile.TemporaryDirectory(dir=destination.parent) as scratch:
        rows_file = Path(scratch) / "rows.jsonl"
        result = export_job(output, rows_file, partial=partial)
        with open(rows_file, "rb") as rows, open(tmp, "wb") as out:
            for line in rows:
                out.write(json.dumps(output_line(json.loads(line), created, decode)).encode() + b"\n")
            sync_file(out)
        publish(tmp, destination)
    return result


def is_batch_job(output: Path) -> bool:
    """Whether the job in `output` runs an OpenAI batch file: its one input is the request table made for it."""
    output = job_root(output)
    directories = JobDir(output).siblings()
    inputs = directories[0].read_job()["inputs"] if directories else []
    return [item["path"] for item in inputs] == [str(requests_path(output))]


def _lazy_decoder(output: Path) -> Decode:
    """Token id -> text with the job's own tokenizer, loaded only if some request asked for logprobs."""

    @functools.cache
    def tokenizer() -> Any:
        manifest = JobDir(output).siblings()[0].read_job()
        return load_tokenizer(Path(manifest["fingerprint"]["model"]))

    return lambda token_id: tokenizer().decode([token_id])
