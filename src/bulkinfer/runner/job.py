"""A run of a job from start (or resume) to finish: the one entry point the CLI and Python callers use.

    outcome = run_job(JobConfig.from_settings(model="ckpt", input=["data/"], output="out"))

Before the model loads, the run checks its inputs and columns, takes the output directory's lock and
decides between a new job and resuming the one there (open_job). Then an executor does the rows:
this process's engine by default, or another passed in (the command line passes Ray's for
`--executor ray`, bulkinfer.integrations.ray_job.RayExecutor).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Protocol

from bulkinfer.errors import UsageError
from bulkinfer.runner.adapters import check_adapter_files, check_adapters_fit
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.loop import JobLoop, Prefetcher, Reporter
from bulkinfer.runner.open_job import OpenJob, open_job
from bulkinfer.runner.readers import read_rows, windows
from bulkinfer.runner.signals import StopSignals
from bulkinfer.runner.tasks import TASKS, EngineFacts, make_task, reserved_columns

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM
    from bulkinfer.models.config import ModelConfig


@dataclass(frozen=True)
class JobOutcome:
    output: Path | str  # a URL for a job on object storage
    rows_total: int
    rows_done: int
    rows_failed: int
    rows_at_start: int  # already done before this run
    stopped_by: int | None  # the signal that stopped the run, if one did

    @property
    def complete(self) -> bool:
        return self.rows_done == self.rows_total


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


def engine_facts(llm: LLM) -> EngineFacts:
    # The reader thread gets its own tokenizer: the engine detokenizes with llm.tokenizer meanwhile.
    return EngineFacts(copy.deepcopy(llm.tokenizer), llm.max_model_len, llm.reasoning is not None,
                       llm.model_config.hidden_size, llm.model_config.head)


class LocalExecutor:
    """The rows through this process's engine."""

    def check(self, config: JobConfig) -> None:
        """The engine's options against the model and this machine (a device that is not here, a length
        past the model's), so that a mistake there is refused before job.json is written."""
        from bulkinfer.engine.reasoning.registry import has_reasoning_parser
        from bulkinfer.engine.request import params_refusal
        from bulkinfer.engine.resolve import resolve  # torch: only a run that computes pays for it
        from bulkinfer.models.checkpoint import ModelNotFoundError, resolve_model_path
        from bulkinfer.models.loader import read_config

        try:
            path = resolve_model_path(config.model, config.engine.revision)
        except ModelNotFoundError as exc:
            raise UsageError(str(exc)) from None
        try:
            model_config = read_config(path, config.engine.model_impl)[0]
            resolve(config.engine, model_config)
        except (ValueError, KeyError) as exc:  # an architecture we cannot run, a bad option for this model
            raise UsageError(f"cannot load {config.model}: {exc}") from None
        _check_task(config, model_config)
        check_adapter_files(config)
        # The job's own sampling settings would make every row an error row: refuse the job instead.
        # Whether the model reasons matters only to a thinking budget; the tokenizer loads only then.
        reasons = config.sampling.thinking_budget is not None and has_reasoning_parser(path, config.engine)
        refusal = params_refusal(config.sampling, model_config.vocab_size, config.engine.max_n, reasons)
        if refusal:
            raise UsageError(f"{refusal}: the job's setting would fail every row")

    def __call__(self, config: JobConfig, job: OpenJob, stop_requested: Callable[[], bool],
                 reporter: Reporter | None) -> None:
        with self.engine(config) as llm:
            if stop_requested():  # loading can take minutes; a Ctrl-C meanwhile should not start the work
                return
            check_adapters_fit(llm, config)
            task = make_task(config, engine_facts(llm))
            rows = read_rows(job.files, job.done, config.window_rows, job.rows, reserved=reserved_columns(config.task))
            prepared = Prefetcher(windows(rows, config.window_rows), task.prepare)
            loop = JobLoop(llm, prepared, job.committer(config, task.types), task, config.in_flight_target,
                           stop_requested, job.rows_total, reporter)
            try:
                loop.run()
            finally:
                prepared.close()

    def engine(self, config: JobConfig) -> ContextManager[LLM]:
        """The engine the rows run on, for the length of the job: loaded for it, closed after it."""
        return load_llm(config)


def _check_task(config: JobConfig, model_config: ModelConfig) -> None:
    """Refuse a task the model cannot serve, or an embedding wider than it, which would fail every row."""
    from bulkinfer.engine.pooling.tasks import model_tasks

    served = model_tasks(model_config, config.engine)
    if TASKS[config.task].ENGINE_TASK not in served:
        runnable = [name for name, task in TASKS.items() if task.ENGINE_TASK in served]
        hint = " (set classifier_from_token to make a causal LM a reranker)" if config.task == "rerank" else ""
        raise UsageError(f"task {config.task}: {config.model} cannot run it{hint}; it runs {', '.join(runnable)}")
    dimensions = config.pooling_params.dimensions
    if config.task == "embed" and dimensions is not None and dimensions > model_config.hidden_size:
        raise UsageError(f"dimensions {dimensions} is above the model's hidden size ({model_config.hidden_size})")


def _engine_options(config: JobConfig) -> dict[str, Any]:
    # Every option is passed: the job's defaults are the engine's, declared once on EngineConfig.
    return dataclasses.asdict(config.engine)
