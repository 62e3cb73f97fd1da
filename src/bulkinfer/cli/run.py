"""`bulkinfer run`: run or resume a job, show its progress, then report what happened and how to go on."""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from bulkinfer.cli.batch_format import batch_job_settings, check_format
from bulkinfer.cli.display import ProgressDisplay
from bulkinfer.cli.jobfile import merge_settings, read_job_file
from bulkinfer.cli.options import config_from_options, run_parameters
from bulkinfer.cli.summary import run_stats, summary_table, write_stats
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.job import JobOutcome, run_job
from bulkinfer.runner.parts import part_of


def run_command(job_file: Optional[Path] = None, hourly_cost: Optional[float] = None, format: Optional[str] = None,
                **options: Any) -> int:
    own = {"hourly_cost": hourly_cost, "format": format}
    settings = merge_settings(read_job_file(job_file) if job_file else {}, {**own, **options})
    hourly_cost = settings.pop("hourly_cost", None)
    format = check_format(settings.pop("format", "rows"))
    if format == "openai-batch":
        settings = batch_job_settings(settings)
    config = config_from_options(settings)
    started = time.monotonic()
    with ProgressDisplay(live=sys.stderr.isatty()) as display:
        outcome = run_job(config, reporter=display)
    if display.last is not None:  # the engine ran; a job that was already complete keeps its stats.json
        _report(config, outcome, run_stats(config, outcome, display.last, time.monotonic() - started, hourly_cost))
    _say_outcome(outcome, "--format openai-batch RESULTS.jsonl" if format == "openai-batch" else "RESULTS.parquet")
    if outcome.stopped_by is not None and not outcome.complete:
        return 128 + outcome.stopped_by
    if not outcome.complete:
        return 1
    return 1 if config.fail_on_error and outcome.rows_failed else 0


# typer reads the options from the signature; all but the first three are generated from JobConfig's fields.
_OWN = [
    inspect.Parameter("job_file", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Optional[Path],
                      default=typer.Argument(None, metavar="[JOB.toml]", show_default=False,
                                             help="TOML job file with the same settings as the flags, as flat "
                                                  "keys (max_tokens = 64); flags override it.")),
    inspect.Parameter("hourly_cost", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[float],
                      default=typer.Option(None, "--hourly-cost", min=0.0, show_default=False,
                                           help="Machine price per hour: stats.json then reports the cost per "
                                                "million output tokens (default: none).")),
    inspect.Parameter("format", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                      default=typer.Option(None, "--format", show_default=False,
                                           help="Input: rows (a table with a prompt column) or openai-batch "
                                                "(an OpenAI Batch API request file) (default: rows).")),
]
run_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    _OWN + run_parameters(), return_annotation=int)
run_command.__annotations__ = {p.name: p.annotation for p in run_command.__signature__.parameters.values()}


def _report(config: JobConfig, outcome: JobOutcome, stats: dict[str, Any]) -> None:
    write_stats(outcome.output, part_of(config), stats)
    Console(stderr=True).print(summary_table(stats))


def _say_outcome(outcome: JobOutcome, export_to: str) -> None:
    done = f"{outcome.rows_done:,} of {outcome.rows_total:,} rows done, {outcome.rows_failed:,} with errors"
    if outcome.complete:
        print(f"bulkinfer: complete: {done}. Export them in input order with: "
              f"bulkinfer export {outcome.output} {export_to}", file=sys.stderr)
    else:
        print(f"bulkinfer: stopped: {done}. Run the same command again to resume.", file=sys.stderr)
