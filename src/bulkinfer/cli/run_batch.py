"""`bulkinfer run-batch -i INPUT -o OUTPUT --model M`: vLLM's command for OpenAI batch files, in one step.

It runs (or resumes) the batch job and writes OUTPUT and the error file, as OpenAI's Batch API does:
successes in OUTPUT, failed requests in OUTPUT's error file. The job's state is a hidden folder
beside OUTPUT, so the same command run again resumes where it stopped and writes the same ids.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import typer

from bulkinfer.cli.batch_format import BATCH_OWNED
from bulkinfer.cli.options import given_options, option_parameters, with_defaults
from bulkinfer.cli.run import run_settings, run_with_settings, say_done
from bulkinfer.errors import UsageError
from bulkinfer.openai_batch import export_openai_batch
from bulkinfer.runner.destination import export_destination
from bulkinfer.settings import Setting, expand_home

# run-batch decides these itself: its one input and output, the batch format, one unsharded job of rows.
_FIXED = ("format", "input", "output", *BATCH_OWNED, "id_column", "context_column", "continuation_column",
          "choices_column", "output_format", "num_shards", "shard")


def state_dir(output_file: Path) -> Path:
    """The job's output directory, request table included: beside OUTPUT, never in the current directory."""
    output_file = output_file.expanduser().resolve()
    return output_file.parent / f".{output_file.name}.bulkinfer"


def error_file(output_file: Path) -> Path:
    """OUTPUT's error file: out.jsonl -> out.errors.jsonl."""
    stem = output_file.name.removesuffix(".jsonl")
    return output_file.with_name(f"{stem}.errors.jsonl")


def run_batch_settings() -> list[Setting]:
    """The flags of `run-batch`: those of `run` that a batch file does not decide, --model now required here."""
    model = [with_defaults(s, default=None, help=s.help + " (required)") for s in run_settings() if s.name == "model"]
    return [*model, *(s for s in run_settings() if s.name not in (*_FIXED, "model"))]


def run_batch_command(input_file: Path, output_file: Path, **options: Any) -> int:
    output_file = export_destination(output_file)  # a mistake in OUTPUT is one line before anything runs
    if input_file.resolve() == output_file.resolve():
        raise UsageError(f"-o {output_file} is the input file; choose another --output-file")
    if not options.get("model"):
        raise UsageError("missing --model: the model directory or hub id to run the batch with")
    job = state_dir(output_file)
    settings = {**given_options(options, run_batch_settings()), "format": "openai-batch",
                "input": [str(input_file)], "output": str(job)}
    ran = run_with_settings(settings)
    if not ran.outcome.complete:
        return ran.exit_status
    errors = error_file(output_file)
    result = export_openai_batch(job, output_file, errors=errors)
    say_done(ran.outcome, f"Wrote {result.rows - result.rows_failed:,} responses to {output_file} and "
                          f"{result.rows_failed:,} failed requests to {errors}")
    return ran.exit_status


# typer reads the options from the signature: vLLM's -i and -o, then one option per setting.
_FILES = [
    inspect.Parameter("input_file", inspect.Parameter.KEYWORD_ONLY, annotation=Path, default=typer.Option(
        ..., "-i", "--input-file", help="The OpenAI batch file: one request per line.", callback=expand_home)),
    inspect.Parameter("output_file", inspect.Parameter.KEYWORD_ONLY, annotation=Path, default=typer.Option(
        ..., "-o", "--output-file", help="Where the response lines go; failed requests go to OUTPUT's "
                                         "error file (out.jsonl -> out.errors.jsonl).", callback=expand_home)),
]
run_batch_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [*_FILES, *option_parameters(run_batch_settings())], return_annotation=int)
run_batch_command.__annotations__ = {p.name: p.annotation for p in run_batch_command.__signature__.parameters.values()}
