"""Run a job from start (or resume) to finish: the one entry point the CLI and Python callers use."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from bulkinfer import LLM
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.inputs import read_rows, windows
from bulkinfer.runner.llm_factory import load_llm
from bulkinfer.runner.loop import JobLoop
from bulkinfer.runner.pipeline import Prefetcher
from bulkinfer.runner.report import Reporter
from bulkinfer.runner.signals import StopSignals
from bulkinfer.runner.start import OpenJob, open_job
from bulkinfer.runner.tasks import make_preparer, make_results


@dataclass(frozen=True)
class JobOutcome:
    output: Path
    rows_total: int
    rows_done: int
    rows_failed: int
    rows_at_start: int  # already done before this run
    stopped_by: int | None  # the signal that stopped the run, if one did

    @property
    def complete(self) -> bool:
        return self.rows_done == self.rows_total


def run_job(config: JobConfig, reporter: Reporter | None = None) -> JobOutcome:
    """Raises UsageError for the user's mistakes, before the model loads wherever they can be found then."""
    with StopSignals() as signals:
        job = open_job(config)
        try:
            rows_at_start = job.progress.rows_done
            if rows_at_start < job.rows_total and not signals.requested:
                if config.executor == "ray":
                    from bulkinfer.integrations.ray_job import run_on_ray  # Ray is an optional extra
                    run_on_ray(config, job, lambda: signals.requested)
                else:
                    _run_engine(config, job, signals, reporter)
            return JobOutcome(job.directory.root, job.rows_total, job.progress.rows_done,
                              job.progress.rows_failed, rows_at_start, signals.received)
        finally:
            job.close()


def _run_engine(config: JobConfig, job: OpenJob, signals: StopSignals, reporter: Reporter | None) -> None:
    with load_llm(config) as llm:
        if not signals.requested:  # loading can take minutes; a Ctrl-C meanwhile should not start the work
            _run_loop(config, job, signals, reporter, llm)


def _run_loop(config: JobConfig, job: OpenJob, signals: StopSignals, reporter: Reporter | None, llm: LLM) -> None:
    # The reader thread gets its own tokenizer: the engine detokenizes with llm.tokenizer meanwhile.
    preparer = make_preparer(config, copy.deepcopy(llm.tokenizer), llm.max_model_len)
    rows = read_rows(job.files, job.done, config.window_rows, job.rows, config.task)
    prepared = Prefetcher(windows(rows, config.window_rows), preparer)
    loop = JobLoop(llm, prepared, job.committer(config), make_results(config), config.in_flight_target,
                   lambda: signals.requested, job.rows_total, reporter)
    try:
        loop.run()
    finally:
        prepared.close()
