"""`--format`: how `run` reads its input and `export` writes results: rows as they are, or OpenAI batch files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bulkinfer.cli.tokenizer import model_tokenizer
from bulkinfer.errors import UsageError
from bulkinfer.openai_batch import convert_batch_file, job_settings
from bulkinfer.openai_batch.convert import prepare_requests_path

FORMATS = ("rows", "openai-batch")
# Settings the batch format fills in itself, from the request lines: the task follows from their url.
BATCH_OWNED = ("prompt_column", "messages_column", "system_prompt", "chat_template", "chat_template_kwargs", "tools",
               "param_columns", "input_format", "task", "query_column", "document_column")


def check_format(value: str) -> str:
    if value not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


def batch_job_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The job's settings with its one input, an OpenAI batch file, replaced by the request table."""
    if not all(settings.get(key) for key in ("model", "input", "output")):
        return settings  # the usual "missing --model" message comes from the config
    clash = [key for key in BATCH_OWNED if settings.get(key)]
    if clash:
        raise UsageError(f"--format openai-batch takes prompts and sampling from each request body; "
                         f"drop {', '.join('--' + key.replace('_', '-') for key in clash)}")
    if len(settings["input"]) != 1:
        raise UsageError("--format openai-batch takes one --input: the batch file")
    batch_file = Path(settings["input"][0])
    if not batch_file.is_file():
        raise UsageError(f"{batch_file}: no such batch file")
    # The tokenizer before the output directory: a mistake in either leaves nothing behind.
    tokenizer = model_tokenizer(settings["model"], settings.get("tokenizer"), settings.get("revision"))
    table = prepare_requests_path(Path(settings["output"]))
    try:
        task = convert_batch_file(batch_file, table, tokenizer)
    except OSError as exc:
        raise UsageError(f"{table}: cannot write the request table in --output ({exc.strerror})") from None
    return {**settings, **job_settings(table, task, adapters=bool(settings.get("lora")))}

