"""`bulkinfer run`: run or resume a job, then say what happened and how to go on."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from bulkinfer.cli.options import config_from_options, run_parameters
from bulkinfer.runner.job import JobOutcome, run_job
from bulkinfer.runner.report import LogReporter


def run_command(**options: Any) -> int:
    config = config_from_options(options)
    outcome = run_job(config, reporter=LogReporter())
    _say_outcome(outcome)
    if outcome.stopped_by is not None and not outcome.complete:
        return 128 + outcome.stopped_by
    if not outcome.complete:
        return 1
    return 1 if config.fail_on_error and outcome.rows_failed else 0


# typer reads the options from the signature; they are generated from JobConfig's fields.
run_command.__signature__ = inspect.Signature(run_parameters(), return_annotation=int)  # type: ignore[attr-defined]
run_command.__annotations__ = {p.name: p.annotation for p in run_command.__signature__.parameters.values()}


def _say_outcome(outcome: JobOutcome) -> None:
    done = f"{outcome.rows_done:,} of {outcome.rows_total:,} rows done, {outcome.rows_failed:,} with errors"
    if outcome.complete:
        print(f"bulkinfer: complete: {done}. Export them in input order with: "
              f"bulkinfer export {outcome.output} RESULTS.parquet", file=sys.stderr)
    else:
        print(f"bulkinfer: stopped: {done}. Run the same command again to resume.", file=sys.stderr)
