"""`bulkinfer run`: run or resume a job, show its progress, then report what happened and how to go on."""

from __future__ import annotations

import inspect
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from bulkinfer.cli.batch_format import FORMATS, batch_job_settings
from bulkinfer.cli.display import ProgressDisplay
from bulkinfer.cli.jobfile import check_keys, load_toml, merge_settings, read_json_files
from bulkinfer.cli.options import given_options, option_parameters, take_settings
from bulkinfer.cli.pipeline_file import is_pipeline_file, run_pipeline_file
from bulkinfer.cli.summary import rows_done, run_stats, summary_table, write_stats
from bulkinfer.errors import UsageError
from bulkinfer.integrations.ray_job import RayExecutor, RaySettings
from bulkinfer.runner.config import JobConfig, job_settings
from bulkinfer.runner.job import JobOutcome, run_job
from bulkinfer.runner.shards import shard_of
from bulkinfer.runner.signals import StopSignals
from bulkinfer.settings import Setting, expand_home, setting, settings_of


@dataclass
class RunCommandSettings:
    """Settings of the `run` command that are not settings of the job; job files take them too."""

    hourly_cost: float | None = setting(None, "Machine price per hour: stats.json then reports the cost per "
                                              "million output tokens (default: none).", panel="Output")
    format: str = setting("rows", "Input: rows (a table with a prompt column) or openai-batch (an OpenAI Batch "
                                  "API request file).", choices=FORMATS,
                         panel="Input")
    executor: str = setting("local", "local (this process) or ray (an actor pool of engine replicas on a Ray "
                                     "cluster).", choices=("local", "ray"),
                           panel="Performance")


def run_settings() -> list[Setting]:
    """Every key a job file may hold and every flag of `run`."""
    return [*settings_of(RunCommandSettings), *job_settings(), *settings_of(RaySettings)]


def run_command(job_file: Optional[Path] = None, **options: Any) -> int:
    from_file = load_toml(job_file) if job_file else {}
    flags = given_options(options, run_settings())
    if is_pipeline_file(from_file):
        if flags:
            raise UsageError(f"{job_file} is a pipeline: set {', '.join(sorted(flags))} in its stages, not as flags")
        return run_pipeline_file(job_file, from_file)
    from_file = check_keys(str(job_file), from_file, run_settings()) if job_file else {}
    settings = read_json_files(merge_settings(from_file, flags))
    ran = run_with_settings(settings)
    if ran.outcome.complete:
        export_to = "RESULTS.jsonl" if ran.command.format == "openai-batch" else "RESULTS.parquet"
        say_done(ran.outcome, f"Export them in input order with: bulkinfer export {ran.outcome.output} {export_to}")
    return ran.exit_status


@dataclass
class Ran:
    """What one run of a job did, for the command that started it to report."""

    config: JobConfig
    command: RunCommandSettings
    outcome: JobOutcome

    @property
    def exit_status(self) -> int:
        if self.outcome.stopped_by is not None and not self.outcome.complete:
            return 128 + self.outcome.stopped_by
        if not self.outcome.complete:
            return 1
        return 1 if self.config.fail_on_error and self.outcome.rows_failed else 0


def run_with_settings(settings: dict[str, Any]) -> Ran:
    """Run or resume the job `settings` describe (flags' names, merged already), showing progress and
    writing stats.json; says so when it stopped before the end."""
    command, ray = take_settings(RunCommandSettings, settings), take_settings(RaySettings, settings)
    if command.format == "openai-batch":
        settings = batch_job_settings(settings)
    config = JobConfig.from_settings(**settings)
    executor = RayExecutor(ray) if command.executor == "ray" else None
    started = time.monotonic()
    # Once a first signal has asked the job to stop, a second exits at once until the command ends,
    # while the summary is written too.
    with StopSignals() as signals:
        with ProgressDisplay(live=sys.stderr.isatty()) as display:
            outcome = run_job(config, reporter=display, executor=executor, signals=signals)
        if display.last is not None:  # the engine ran; a job that was already complete keeps its stats.json
            stats = run_stats(config, outcome, display.last, time.monotonic() - started, command.hourly_cost)
            stats["settings"].update({**asdict(command), **asdict(ray)})
            _report(config, outcome, stats)
        if not outcome.complete:
            print(f"bulkinfer: stopped: {rows_done(outcome)}. Run the same command again to resume.", file=sys.stderr)
    return Ran(config, command, outcome)


def say_done(outcome: JobOutcome, next_step: str) -> None:
    print(f"bulkinfer: complete: {rows_done(outcome)}. {next_step}", file=sys.stderr)


# typer reads the options from the signature: the job file, then one option per setting.
_JOB_FILE = inspect.Parameter("job_file", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Optional[Path],
                              default=typer.Argument(None, metavar="[JOB.toml]", show_default=False,
                                                     help="TOML job file with the same settings as the flags, as "
                                                          "flat keys (max_tokens = 64); flags override it.",
                                                     callback=expand_home))
run_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_JOB_FILE, *option_parameters(run_settings())], return_annotation=int)
run_command.__annotations__ = {p.name: p.annotation for p in run_command.__signature__.parameters.values()}


def _report(config: JobConfig, outcome: JobOutcome, stats: dict[str, Any]) -> None:
    write_stats(outcome.output, shard_of(config), stats, config.storage_options)
    Console(stderr=True).print(summary_table(stats))
