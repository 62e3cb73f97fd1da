"""Export a finished batch job as an OpenAI batch output file, one line per request, in input order."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bulkinfer.durable import publish, sync_file
from bulkinfer.engine.tokenizer import load_tokenizer
from bulkinfer.openai_batch.convert import requests_path
from bulkinfer.openai_batch.logprobs import Decode
from bulkinfer.openai_batch.responses import output_line
from bulkinfer.runner.destination import export_destination, writing
from bulkinfer.runner.export import ExportResult, export_job
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.outdir.ledger import job_id
from bulkinfer.runner.status import job_root
from bulkinfer.runner.storage import is_remote


def export_openai_batch(output: Path, destination: Path, partial: bool = False,
                        errors: Path | None = None) -> ExportResult:
    """The job's rows through the runner's export (order, completeness), then mapped line by line.
    With `errors`, failed requests go there instead, as the Batch API's error file (written even when empty)."""
    output, destination = job_root(output), export_destination(destination)
    created = int(time.time())
    decode, request_id = _lazy_decoder(output), _request_ids(output)
    targets = [destination] if errors is None else [destination, export_destination(errors)]
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(writing(target)) for target in targets]
        rows_file = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=destination.parent))) / "rows.jsonl"
        result = export_job(output, rows_file, partial=partial)
        outs = [stack.enter_context(open(tmp, "wb")) for tmp in tmps]
        answers, failures = outs[0], outs[-1]
        with open(rows_file, "rb") as rows:
            for line in rows:
                row = json.loads(line)
                answer = output_line(row, created, decode, request_id(row["row_index"]))
                failed = answer["response"]["status_code"] != 200
                (failures if failed else answers).write(json.dumps(answer).encode() + b"\n")
        for out, tmp, target in zip(outs, tmps, targets):
            sync_file(out)
            publish(tmp, target)
    return result


def is_batch_job(output: Path | str) -> bool:
    """Whether the job in `output` runs an OpenAI batch file: its one input is the request table made for it,
    which is local (run-batch keeps its job on the local disk)."""
    if is_remote(str(output)):
        return False
    output = job_root(Path(output))
    directories = JobDir(output).siblings()
    inputs = directories[0].read_job()["inputs"] if directories else []
    return [item["path"] for item in inputs] == [str(requests_path(output))]


def _request_ids(output: Path) -> Callable[[int], str]:
    """Row index -> the request's 32-hex-digit id: a hash of the job's id, the time the job was created and
    the row, so ids differ between jobs (batches merged later do not collide) and stay the same on resume."""
    manifest = JobDir(output).siblings()[0].read_job()
    job = f"{job_id(manifest['fingerprint'])}:{manifest['created']}"
    return lambda index: hashlib.sha256(f"{job}:{index}".encode()).hexdigest()[:32]


def _lazy_decoder(output: Path) -> Decode:
    """Token id -> text with the job's own tokenizer, loaded only if some request asked for logprobs."""

    @functools.cache
    def tokenizer() -> Any:
        manifest = JobDir(output).siblings()[0].read_job()
        return load_tokenizer(Path(manifest["fingerprint"]["model"]))

    return lambda token_id: tokenizer().decode([token_id])
