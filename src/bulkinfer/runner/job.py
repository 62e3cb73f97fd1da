"""A run of a job from start (or resume) to finish: the one entry point the CLI and Python callers use.

    outcome = run_job(JobConfig.from_settings(model="ckpt", input=["data/"], output="out"))

Before the model loads, the run checks its inputs and columns, takes the output directory's lock and
decides between a new job and resuming the one there (open_job). Then an executor does the rows:
this process's engine by default, or another passed in (the command line passes Ray's for
`--executor ray`, bulkinfer.integrations.ray_job.RayExecutor).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.inputs import (
    InputFile,
    Source,
    check_columns,
    identity_of,
    read_rows,
    resolve_sources,
    scan_inputs,
    windows,
)
from bulkinfer.runner.loop import JobLoop, Prefetcher, Reporter
from bulkinfer.runner.outdir.commit import Committer
from bulkinfer.runner.outdir.fingerprint import differences, job_fingerprint
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.outdir.ledger import JobProgress, Ledger, load_progress
from bulkinfer.runner.outdir.lock import JobLock
from bulkinfer.runner.outdir.result_files import ResultFiles
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.shards import shard_of
from bulkinfer.runner.signals import StopSignals
from bulkinfer.runner.tasks import make_task

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM


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


@dataclass
class OpenJob:
    """A job whose directory this process holds; close() releases it."""

    directory: JobDir
    files: list[InputFile]
    rows: range  # the row positions this run does: all of them, or its shard's block
    done: RowSet
    progress: JobProgress
    ledger: Ledger
    lock: JobLock

    @property
    def rows_total(self) -> int:
        return len(self.rows)

    def committer(self, config: JobConfig) -> Committer:
        files = ResultFiles(self.directory.results_path, config.output_format)
        return Committer(files, self.ledger, self.progress, config.shard_rows, config.commit_seconds)

    def close(self) -> None:
        self.ledger.close()
        self.lock.release()


class Executor(Protocol):
    """Does the rows of an open job that are not done yet, committing them through job.committer()."""

    def check(self, config: JobConfig) -> None:
        """Raise UsageError for a job this executor cannot run, before anything is written."""

    def __call__(self, config: JobConfig, job: OpenJob, stop_requested: Callable[[], bool],
                 reporter: Reporter | None) -> None: ...


def run_job(config: JobConfig, reporter: Reporter | None = None, executor: Executor | None = None,
            signals: StopSignals | None = None) -> JobOutcome:
    """Raises UsageError for the user's mistakes, before the model loads wherever they can be found then.

    Ctrl-C and SIGTERM stop the job cleanly (a second one exits at once) while it runs; pass `signals`,
    already entered, to keep that so over a longer stretch, as the command line does up to its exit.
    """
    executor = executor or LocalExecutor()
    executor.check(config)
    if signals is None:
        with StopSignals() as signals:
            return _run(config, reporter, executor, signals)
    return _run(config, reporter, executor, signals)


def _run(config: JobConfig, reporter: Reporter | None, executor: Executor, signals: StopSignals) -> JobOutcome:
    job = open_job(config)
    try:
        rows_at_start = job.progress.rows_done
        if rows_at_start < job.rows_total and not signals.requested:
            executor(config, job, lambda: signals.requested, reporter)
        return JobOutcome(job.directory.root, job.rows_total, job.progress.rows_done,
                          job.progress.rows_failed, rows_at_start, signals.received)
    finally:
        job.close()


def load_llm(config: JobConfig) -> LLM:
    from bulkinfer.engine.llm import LLM  # torch comes with the engine: only a run that computes pays for it

    try:
        return LLM(config.model, **_engine_options(config))
    except ValueError as exc:  # the engine's refusals of a checkpoint or of engine settings
        raise UsageError(f"cannot load {config.model}: {exc}") from None


class LocalExecutor:
    """The rows through this process's engine."""

    def check(self, config: JobConfig) -> None:
        pass  # every job runs here

    def __call__(self, config: JobConfig, job: OpenJob, stop_requested: Callable[[], bool],
                 reporter: Reporter | None) -> None:
        with load_llm(config) as llm:
            if stop_requested():  # loading can take minutes; a Ctrl-C meanwhile should not start the work
                return
            # The reader thread gets its own tokenizer: the engine detokenizes with llm.tokenizer meanwhile.
            task = make_task(config, copy.deepcopy(llm.tokenizer), llm.max_model_len)
            rows = read_rows(job.files, job.done, config.window_rows, job.rows, config.task)
            prepared = Prefetcher(windows(rows, config.window_rows), task.prepare)
            loop = JobLoop(llm, prepared, job.committer(config), task.results, config.in_flight_target,
                           stop_requested, job.rows_total, reporter)
            try:
                loop.run()
            finally:
                prepared.close()


def open_job(config: JobConfig) -> OpenJob:
    sources = resolve_sources(config.input, config.input_format)
    check_columns(sources, config)
    directory = JobDir(Path(config.output), shard_of(config))
    directory.create_root()
    if not directory.siblings() and directory.holds_other_files():
        raise UsageError(f"{directory.root}: exists, is not empty and holds no bulkinfer job; "
                         f"choose an empty or new --output directory")
    lock = JobLock(directory.lock_path)
    lock.acquire()
    try:
        files = _this_job_files(directory, config, sources)
        done = RowSet()
        progress = load_progress(directory.ledger_path, done)
        ledger = Ledger(directory.ledger_path)  # cuts off a line torn by a crash, before anything is appended
        ResultFiles(directory.results_path).remove_except({span.name for span in progress.files})
        rows = directory.shard.rows(sum(file.rows for file in files))
        return OpenJob(directory, files, rows, done, progress, ledger, lock)
    except BaseException:
        lock.release()
        raise


def _engine_options(config: JobConfig) -> dict[str, Any]:
    # Every option is passed: the job's defaults are the engine's, declared once on EngineConfig.
    return {name: getattr(config.engine, name) for name in config.engine.__dataclass_fields__}


def _this_job_files(directory: JobDir, config: JobConfig, sources: list[Source]) -> list[InputFile]:
    """The input files of the job in `directory`: the stored ones when it is this job, else a new job."""
    current = _as_stored(job_fingerprint(config, [identity_of(source) for source in sources]))
    _check_siblings(directory, current)
    if directory.has_job():
        manifest = directory.read_manifest()
        changed = differences(manifest["fingerprint"], current)
        if not changed:
            return [InputFile(**item) for item in manifest["inputs"]]
        if not config.force:
            raise UsageError(f"{directory.root} holds a different job ({'; '.join(changed)}); rerun with the "
                             f"same settings to resume it, pass --force to discard its results and start over, "
                             f"or choose another --output")
        directory.reset()
    files = scan_inputs(sources)
    directory.write_manifest({
        "fingerprint": job_fingerprint(config, [file.identity() for file in files]),
        "inputs": [file.to_json() for file in files],
        "rows_total": sum(file.rows for file in files),
        "num_shards": directory.shard.count,
        "shard": directory.shard.index,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    })
    return files


def _check_siblings(directory: JobDir, current: dict[str, Any]) -> None:
    """The shards running into one directory must be shards of one job, split the same way."""
    for other in directory.siblings():
        if other.shard == directory.shard:
            continue
        if other.shard.count != directory.shard.count:
            raise UsageError(f"{directory.root} holds a job split into {other.shard.count} shard(s); this run is "
                             f"split into {directory.shard.count}: split it the same way, or choose another --output")
        changed = differences(other.read_manifest()["fingerprint"], current)
        if changed:
            raise UsageError(f"{directory.root}: its {other.shard.describe()} is a different job "
                             f"({'; '.join(changed)}); every shard must run the same job, or choose another --output")


def _as_stored(value: dict[str, Any]) -> dict[str, Any]:
    """The value as it reads back from job.json (tuples become lists), so equal settings compare equal."""
    return json.loads(json.dumps(value))
