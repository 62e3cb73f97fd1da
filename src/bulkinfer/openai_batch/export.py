"""Export a finished batch job as an OpenAI batch output file, one line per request, in input order."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from bulkinfer.durable import publish, sync_file
from bulkinfer.engine.tokenizer import load_tokenizer
from bulkinfer.openai_batch.convert import requests_path
from bulkinfer.openai_batch.logprobs import Decode
from bulkinfer.openai_batch.responses import JobAnswers, output_line
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.destination import export_destination, writing
from bulkinfer.runner.export import ExportResult, export_job
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.outdir.ledger import job_id
from bulkinfer.runner.status import job_root
from bulkinfer.runner.storage import is_remote


def export_openai_batch(output: Path, destination: Path, partial: bool = False,
                        errors: Path | None = None) -> ExportResult:
    """The job's rows through the runner's export (order, completeness), then gathered and mapped line by line.
    With `errors`, failed requests go there instead, as the Batch API's error file (written even when empty).
    The result counts the output's lines: `rows` the lines written, `rows_failed` those of failed requests."""
    output, destination = job_root(output), export_destination(destination)
    manifest = JobDir(output).siblings()[0].read_job()
    job = JobAnswers(int(time.time()), _lazy_decoder(manifest), manifest["fingerprint"].get("normalize", True))
    request_id = _request_ids(manifest)
    lines = failed = 0
    targets = [destination] if errors is None else [destination, export_destination(errors)]
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(writing(target)) for target in targets]
        rows_file = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=destination.parent))) / "rows.jsonl"
        result = export_job(output, rows_file, partial=partial)
        outs = [stack.enter_context(open(tmp, "wb")) for tmp in tmps]
        answers, failures = outs[0], outs[-1]
        with open(rows_file, "rb") as rows:
            for line_rows in _request_lines(rows):
                answer = output_line(line_rows, job, request_id(line_rows[0][ROW_INDEX]))
                failure = answer["response"]["status_code"] != 200
                lines, failed = lines + 1, failed + failure
                (failures if failure else answers).write(json.dumps(answer).encode() + b"\n")
        for out, tmp, target in zip(outs, tmps, targets):
            sync_file(out)
            publish(tmp, target)
    return dataclasses.replace(result, rows=lines, rows_failed=failed)


def _request_lines(rows: IO[bytes]) -> Iterator[list[dict[str, Any]]]:
    """The exported rows gathered by the request line they came from, in order: a pooling line has one row per
    input (batch_line, batch_items), any other line one row. A line that a partial export holds only some rows
    of is not done, and left out."""
    line: list[dict[str, Any]] = []
    for raw in rows:
        row = json.loads(raw)
        if line and (row.get("batch_line") is None or row["batch_line"] != line[0]["batch_line"]):
            yield from _if_whole(line)
            line = []
        line.append(row)
    yield from _if_whole(line)


def _if_whole(line: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    if line and len(line) == (line[0].get("batch_items") or 1):
        yield line


def is_batch_job(output: Path | str) -> bool:
    """Whether the job in `output` runs an OpenAI batch file: its one input is the request table made for it,
    which is local (run-batch keeps its job on the local disk)."""
    if is_remote(str(output)):
        return False
    output = job_root(Path(output))
    directories = JobDir(output).siblings()
    inputs = directories[0].read_job()["inputs"] if directories else []
    return [item["path"] for item in inputs] == [str(requests_path(output))]


def _request_ids(manifest: dict[str, Any]) -> Callable[[int], str]:
    """Row index -> the request's 32-hex-digit id: a hash of the job's id, the time the job was created and
    the row (a line's first), so ids differ between jobs (batches merged later do not collide) and stay the same
    on resume."""
    job = f"{job_id(manifest['fingerprint'])}:{manifest['created']}"
    return lambda index: hashlib.sha256(f"{job}:{index}".encode()).hexdigest()[:32]


def _lazy_decoder(manifest: dict[str, Any]) -> Decode:
    """Token id -> text with the job's own tokenizer, loaded only if some request asked for logprobs."""

    @functools.cache
    def tokenizer() -> Any:
        return load_tokenizer(Path(manifest["fingerprint"]["model"]))

    return lambda token_id: tokenizer().decode([token_id])
