"""A pipeline: stages run one after another in this process, each model stage a job with its own output
directory, so each is done exactly once and resumes where it stopped.

    Pipeline(input="prompts.jsonl", output="out", stages=[
        {"name": "generate", "model": "policy", "n": 4, "explode": True},
        {"name": "reward", "model": "rm", "task": "reward", "prompt_template": "{prompt}{generated_text}",
         "rank_by": "reward", "keep_top": 1},
    ]).run()

A stage's cache key is its input's identity, its settings and its model's fingerprint: the first two
make its input table (rows.py), and the job's own fingerprint holds the table's identity, the settings
and the model's. A stage whose key changed has its results replaced (as --force does) and is done again,
and so is every stage after it, since its input's identity changed; a stage whose key is unchanged and
whose ledger covers its input is not run at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bulkinfer.errors import UsageError
from bulkinfer.runner.job import JobOutcome, run_job
from bulkinfer.runner.loop import Reporter
from bulkinfer.runner.outdir.layout import INPUT_TABLE, JobDir
from bulkinfer.runner.pipeline import rows as stage_rows
from bulkinfer.runner.pipeline.dedup import dedup
from bulkinfer.runner.pipeline.layout import check_stage_name, stage_dir, take_output, write_record
from bulkinfer.runner.pipeline.models import SharedModel
from bulkinfer.runner.pipeline.rows import PIPELINE_ERROR, Row
from bulkinfer.runner.pipeline.stage import Stage
from bulkinfer.runner.pipeline.templates import MessagesTemplate, Template
from bulkinfer.runner.pipeline.transforms import ERROR, Batches, explode, is_sound, keep_top, keep_where
from bulkinfer.runner.signals import StopSignals
from bulkinfer.runner.tasks import reserved_columns

RECORD_VERSION = 1


@dataclass(frozen=True)
class StageOutcome:
    stage: str
    job: JobOutcome | None  # None for a pure transform


@dataclass
class StageOutput:
    batches: Callable[[], Batches]  # the stage's rows, afresh on each call, a bounded batch at a time
    sample_columns: list[str]  # columns with one entry per sample, until explode


class Pipeline:
    def __init__(self, input: str | list[str], output: str | Path, stages: list[Stage | dict[str, Any]],
                 input_format: str | None = None) -> None:
        # Absolute, so that status and export find them from any directory.
        given = [input] if isinstance(input, str) else input
        self.inputs = [str(Path(path).expanduser().absolute()) for path in given]
        self.input_format = input_format
        self.output = Path(output).expanduser().resolve()
        if not stages:
            raise UsageError("a pipeline needs at least one stage")
        self.stages = [stage if isinstance(stage, Stage) else Stage.from_table(stage) for stage in stages]
        self.sources = [self._source_of(index) for index in range(len(self.stages))]
        self.models = SharedModel()  # one model loaded at a time, kept for the next stage that runs it
        self._outputs: dict[int, StageOutput] = {}

    @classmethod
    def from_record(cls, output: Path, record: dict[str, Any]) -> Pipeline:
        """The pipeline a pipeline.json describes (status and export read a directory this way)."""
        stages = [{**item["stage"], **item["job"]} for item in record["stages"]]
        return cls(record["input"], output, stages, record.get("input_format"))

    def run(self, reporter: Callable[[Stage], Reporter | None] | None = None,
            signals: StopSignals | None = None) -> list[StageOutcome]:
        """Every stage, in order, until one does not complete (a signal stopped it). `reporter(stage)`: the
        progress display for a model stage's job. Ctrl-C and SIGTERM stop it cleanly, as they stop a job."""
        if signals is None:
            with StopSignals() as signals:
                return self.run(reporter, signals)
        stage_rows.input_identity(self.inputs, self.input_format)  # a missing input: refused before any write
        self._outputs.clear()  # what an earlier run() read may have been redone since
        take_output(self.output)
        write_record(self.output, self.record())
        outcomes = []
        try:
            for index, stage in enumerate(self.stages):
                job = self._run_model_stage(index, reporter, signals) if stage.has_model else None
                outcomes.append(StageOutcome(stage.name, job))
                if job is not None and not job.complete:
                    break
        finally:
            self.models.release()
        return outcomes

    def rows(self, stage: str | None = None) -> list[Row]:
        """The output of `stage` (default: the last), once its model stages are complete."""
        return [row for batch in self.batches(stage) for row in batch]

    def batches(self, stage: str | None = None) -> Batches:
        """The output of `stage` (default: the last) a bounded batch at a time, in order: what `rows` holds
        whole. Refused at once, before any row, unless its model stages are complete and current."""
        return self._output(self.index_of(stage) if stage else len(self.stages) - 1).batches()

    def index_of(self, name: str) -> int:
        names = [stage.name for stage in self.stages]
        if name not in names:
            raise UsageError(f"no stage {name!r}; the stages are: {', '.join(names)}")
        return names.index(name)

    def directory(self, index: int) -> Path:
        return stage_dir(self.output, index, self.stages[index].name)

    def record(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, "input": self.inputs, "input_format": self.input_format,
                "stages": [stage.describe() for stage in self.stages]}

    def _source_of(self, index: int) -> int | None:
        """The index of the stage whose output stage `index` reads; None: the pipeline's input."""
        stage = self.stages[index]
        check_stage_name(stage.name)
        earlier = [other.name for other in self.stages[:index]]
        if stage.name in earlier:
            raise UsageError(f"two stages are named {stage.name}")
        if stage.own.input is None:
            return index - 1 if index else None
        if stage.own.input not in earlier:
            raise UsageError(f"stage {stage.name}: input {stage.own.input!r} is not an earlier stage")
        return earlier.index(stage.own.input)

    def input_current(self, index: int) -> bool:
        """Whether a model stage's input table holds what its input stage's output is now."""
        return stage_rows.table_is_current(self.directory(index) / INPUT_TABLE, self._table_identity(index))

    def _table_identity(self, index: int) -> str:
        return stage_rows.identity(self._input_identity(index), self.stages[index].template_part())

    def _run_model_stage(self, index: int, reporter: Callable[[Stage], Reporter | None] | None,
                         signals: StopSignals) -> JobOutcome:
        stage, directory = self.stages[index], self.directory(index)
        table, content = directory / INPUT_TABLE, self._table_identity(index)
        if not stage_rows.table_is_current(table, content):
            job_dir = JobDir(directory)
            job_dir.check_free()
            job_dir.create_root()
            # Rendered first: a template may read a column this stage's own results replace (generated_text).
            dropped = reserved_columns(stage.task)
            stage_rows.write_table(table, lambda: (stage_rows.without(batch, dropped) for batch in
                                                   self._templated(stage, self._input_rows(index))), content)
        return run_job(stage.job_config(table, directory), reporter(stage) if reporter else None, self.models, signals)

    def _output(self, index: int) -> StageOutput:
        if index not in self._outputs:
            self._outputs[index] = self._compute(index)
        return self._outputs[index]

    def _compute(self, index: int) -> StageOutput:
        stage = self.stages[index]
        source = self.sources[index]
        upstream = self._output(source).sample_columns if source is not None else []
        if stage.has_model and not self.input_current(index):
            raise UsageError(f"stage {stage.name}: its results are of an earlier input or settings; run the "
                             f"pipeline again to bring it up to date")
        samples = stage.sample_columns(upstream)
        return StageOutput(lambda: self._transformed(index, samples), [] if stage.own.explode else samples)

    def _transformed(self, index: int, samples: list[str]) -> Batches:
        """The stage's rows: its results (or, for a pure transform, its input), through its transforms."""
        stage = self.stages[index]
        if stage.has_model:
            batches = stage_rows.read_results(self.directory(index))
        else:
            templated = self._templated(stage, self._input_rows(index))
            batches = ([_errors_shown(row) for row in batch] for batch in templated)
        if stage.own.explode:
            batches = (explode(batch, samples) for batch in batches)
        if stage.filter is not None:
            batches = (keep_where(batch, stage.filter) for batch in batches)
        if stage.own.rank_by is not None:
            batches = keep_top(batches, stage.own.rank_by, stage.own.keep_top)
        if stage.dedup is not None:
            batches = dedup(batches, stage.dedup)
        return (batch for batch in batches if batch)

    def _input_rows(self, index: int) -> Batches:
        source = self.sources[index]
        if source is None:
            return stage_rows.read_input(self.inputs, self.input_format)
        return (stage_rows.without([row for row in batch if is_sound(row)], (ERROR,))
                for batch in self._output(source).batches())

    def _input_identity(self, index: int) -> str:
        source = self.sources[index]
        if source is None:
            return stage_rows.input_identity(self.inputs, self.input_format)
        return self._output_identity(source)

    def _output_identity(self, index: int) -> str:
        """What a stage's output is a function of: its committed results (from its ledger: cheap, and the same
        until they change) or, for a pure transform, its input; and its own settings."""
        made_of = (stage_rows.results_identity(self.directory(index)) if self.stages[index].has_model
                   else self._input_identity(index))
        return stage_rows.identity(made_of, self.stages[index].describe())

    @staticmethod
    def _templated(stage: Stage, batches: Batches) -> Batches:
        """The rows with the stage's prompt (or messages) rendered; one that cannot be gets its reason instead."""
        renderer = stage.messages or stage.template
        if renderer is None:
            return batches
        return ([_rendered(stage, renderer, row) for row in batch] for batch in batches)


def _rendered(stage: Stage, renderer: Template | MessagesTemplate, row: Row) -> Row:
    if row.get(PIPELINE_ERROR) is not None:
        return row
    try:
        return {**row, stage.prompt_target: renderer.render(row)}
    except ValueError as exc:
        return {**row, stage.prompt_target: None, PIPELINE_ERROR: str(exc)}


def _errors_shown(row: Row) -> Row:
    """A pure transform's row that could not be made: its reason is its error."""
    reason = row.get(PIPELINE_ERROR)
    shown = {key: value for key, value in row.items() if key != PIPELINE_ERROR}
    return shown if reason is None else {**shown, ERROR: reason}
