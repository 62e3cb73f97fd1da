"""A batch input file -> the request table the runner reads: one JSONL row per line (per input, for the
pooling endpoints), prompts rendered, and the one task the lines' urls need.

Chat messages are rendered with the model's chat template here, so every row carries plain prompt
text and the runner needs no notion of the batch format. The table is rewritten on every run and
given the batch file's modification time: the same batch file and model give the same table, file
identity included, so a rerun resumes the job instead of seeing a changed input.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Callable

from bulkinfer.durable import publish, sync_file
from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError
from bulkinfer.errors import UsageError
from bulkinfer.openai_batch.requests import PER_ROW, ParsedLine, parse_line, table_row
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.sampling_params import template_variables


def requests_path(output: Path) -> Path:
    """Inside the job's output directory: the job's own input, kept with its state."""
    return JobDir(output.expanduser().resolve()).input_table_path


def prepare_requests_path(output: Path) -> Path:
    """requests_path, with the output directory made, if it is new; refused if it holds files of the user's."""
    directory = JobDir(output.expanduser().resolve())
    directory.check_free()
    directory.create_root()
    return directory.input_table_path


def convert_batch_file(batch_file: Path, table: Path, tokenizer: Any) -> str:
    """Write the request table for `batch_file`, an existing file; returns the task its lines need (generate
    for an empty file)."""
    tmp = table.with_name(table.name + ".tmp")
    try:
        task = _write_table(batch_file, tmp, tokenizer)
    except UsageError:
        tmp.unlink()
        raise
    stat = batch_file.stat()
    os.utime(tmp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    publish(tmp, table)
    return task


def _write_table(batch_file: Path, tmp: Path, tokenizer: Any) -> str:
    task, waiting, valid, first_error = None, [], 0, None
    chat_template = functools.cache(lambda: ChatTemplate(tokenizer))  # compiled for the first chat row
    with open(batch_file, "rb") as lines, open(tmp, "wb") as out:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            parsed = parse_line(line, number)
            task = _one_task(batch_file, task, parsed, number)
            waiting.extend(parsed.rows)
            if task is None:  # broken lines before the first request: the table's columns are not known yet
                continue
            for row in waiting:
                row = _rendered(table_row(row, task), chat_template, tokenizer)
                out.write(json.dumps(row).encode() + b"\n")
                valid += row["batch_error"] is None
                first_error = first_error or row["batch_error"]
            waiting.clear()
        sync_file(out)
    first_error = first_error or (waiting[0]["batch_error"] if waiting else None)
    if first_error and not valid:  # not one line is a request: the wrong file, not a few broken lines
        raise UsageError(f"{batch_file}: no line is an OpenAI batch request ({first_error})")
    return task or "generate"


def _one_task(batch_file: Path, task: str | None, parsed: ParsedLine, number: int) -> str | None:
    """The file's task so far: one job runs one task, so a line needing another refuses the file."""
    if task is None or parsed.task in (None, task):
        return task or parsed.task
    raise UsageError(f"{batch_file} line {number}: {parsed.rows[0]['url']} needs task {parsed.task}, but the lines "
                     f"before it need task {task}; one batch file runs one task, so split it by url")


def job_settings(table: Path, task: str, adapters: bool = False) -> dict[str, Any]:
    """The settings that make a job of `task` read the request table: its prompts (or query and document
    columns) and, for generation, each body's sampling; with LoRA adapters, body.model chooses a line's adapter
    (or the base model, by its own name)."""
    if task == "generate":
        params = {s.name: f"body_{s.field}" for s in PER_ROW}
        columns = {"prompt_column": "prompt", "messages_column": None,
                   "param_columns": {**params, **({"lora": "body_model"} if adapters else {})}}
    else:
        columns = {"prompt_column": "prompt", "query_column": "query", "document_column": "document"}
    return {"input": [str(table)], "input_format": "jsonl", "task": task, **columns}


def _rendered(row: dict[str, Any], chat_template: Callable[[], ChatTemplate], tokenizer: Any) -> dict[str, Any]:
    messages, template_kwargs = row.pop("messages", None), row.pop("chat_template_kwargs", None)
    if messages is not None and row["batch_error"] is None:
        tools = json.loads(row["body_tools"]) if row["body_tools"] else None
        try:
            # The body's chat_template_kwargs win over what its settings tell the template (reasoning_effort).
            variables = {**template_variables(row["body_reasoning_effort"]), **(template_kwargs or {})}
            text = chat_template().render(messages, tools=tools, template_kwargs=variables)
            row["prompt"] = _without_bos(text, tokenizer)
        except ChatTemplateError as exc:
            row["batch_error"] = str(exc)
    return row


def _without_bos(text: str, tokenizer: Any) -> str:
    # The runner tokenizes prompt text with the tokenizer's special tokens, which add BOS again.
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]:
        return text[len(bos):]
    return text
