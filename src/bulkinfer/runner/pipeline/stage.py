"""One stage of a pipeline: a job of its own (model, task, sampling...: a job's keys) with what it does
to its rows around the model: a template before it; explode, filter, rank_by/keep_top and dedup after.
A stage with no model is a pure transform of its input.

    Stage("judge", model="judge-ckpt", task="choice", prompt_template="Is this right? {generated_text}",
          choices_column="verdicts", filter="choice == 0")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig, job_settings
from bulkinfer.runner.pipeline.dedup import Dedup
from bulkinfer.runner.pipeline.expression import Expression
from bulkinfer.runner.pipeline.templates import MessagesTemplate, Template
from bulkinfer.runner.tasks import TASKS
from bulkinfer.settings import Setting, setting, settings_of

# A job's keys that belong to the pipeline as a whole, or to how one process runs: not a stage's.
NOT_STAGE_KEYS = ("input", "output", "input_format", "force", "num_shards", "shard")
# Tasks whose prompt is one text (or chat) column, which a template can fill.
TEMPLATED_TASKS = ("generate", "choice", "embed", "classify", "reward")


@dataclass
class StageSettings:
    """A stage's own keys, beside the job keys it takes; see docs/pipelines.md."""

    HELP_PANEL: ClassVar[str] = "Input"

    name: str = setting(help="The stage's name: its directory is OUTPUT/stages/NN-NAME, and later stages' "
                             "input names it.")
    input: str | None = setting(None, "The earlier stage whose output this stage reads (default: the "
                                      "previous stage; the first reads the pipeline's input).")
    prompt_template: str | None = setting(None, "The prompt, with {column} placeholders over earlier "
                                                "columns, written to the stage's prompt_column.")
    messages_template: list[dict] | None = setting(None, "Chat messages, a list of {role, content} with "
                                                         "{column} placeholders, written to messages_column.")
    filter: str | None = setting(None, "Keep the rows this expression holds for (docs/pipelines.md#filter).")
    explode: bool = setting(False, "One row per sample of an n > 1 generation, with an output_index column.")
    rank_by: str | None = setting(None, "With keep_top: the column whose highest values are the best rows.")
    keep_top: int | None = setting(None, "Keep this many best rows (rank_by) per source row: best-of-n.")
    dedup: dict[str, Any] | None = setting(None, "Drop rows whose embedding is within a cosine similarity "
                                                 "threshold of an earlier kept row: {column, threshold}.")


def stage_keys() -> list[Setting]:
    return settings_of(StageSettings)


def stage_job_keys() -> list[Setting]:
    """The job keys a stage may set."""
    return [s for s in job_settings() if s.name not in NOT_STAGE_KEYS]


def split_table(table: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A [[stages]] table's own keys and its job's keys; a stage with no name, or a key of the whole
    pipeline's, is refused."""
    own_names = {s.name for s in stage_keys()}
    own = {key: value for key, value in table.items() if key in own_names}
    job = {key: value for key, value in table.items() if key not in own_names}
    if not isinstance(own.get("name"), str) or not own["name"]:
        raise UsageError(f"every stage needs a name, got {table.get('name')!r}")
    refused = sorted(set(job) & set(NOT_STAGE_KEYS))
    if refused:
        raise UsageError(f"stage {own['name']}: {', '.join(refused)} is set for the whole pipeline, not a stage")
    return own, job


class Stage:
    """A stage checked in full: its transforms compiled, its job's settings valid."""

    def __init__(self, own: StageSettings, job: dict[str, Any]) -> None:
        self.own, self.job = own, dict(job)
        self.name = own.name
        self.template = Template(own.prompt_template, "prompt_template") if own.prompt_template is not None else None
        self.messages = MessagesTemplate(own.messages_template) if own.messages_template is not None else None
        self.filter = Expression(own.filter) if own.filter is not None else None
        self.dedup = Dedup.from_table(own.dedup) if own.dedup is not None else None
        self._check()

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> Stage:
        """A stage from its keys: its own and a job's, mixed as in a [[stages]] table."""
        own, job = split_table(table)
        try:
            return cls(StageSettings(**own), job)
        except TypeError as exc:
            raise UsageError(f"stage {own['name']}: {exc}") from None

    @property
    def has_model(self) -> bool:
        return "model" in self.job

    @property
    def task(self) -> str | None:
        return self.job.get("task", "generate") if self.has_model else None

    def job_config(self, table: Path, output: Path) -> JobConfig:
        """The stage's job: its input table in, its own directory out; a changed input or setting replaces
        its results (force), an unchanged one resumes."""
        settings = {**self.job, "input": [str(table)], "input_format": "jsonl", "output": str(output), "force": True}
        if self.messages is not None:
            settings.setdefault("messages_column", "messages")
        return JobConfig.from_settings(**settings)

    def _check(self) -> None:
        where = f"stage {self.name}"
        if (self.own.rank_by is None) != (self.own.keep_top is None):
            raise UsageError(f"{where}: rank_by and keep_top go together")
        if self.own.keep_top is not None and self.own.keep_top < 1:
            raise UsageError(f"{where}: keep_top must be >= 1, got {self.own.keep_top}")
        if self.template is not None and self.messages is not None:
            raise UsageError(f"{where}: give prompt_template or messages_template, not both")
        if not self.has_model:
            extra = sorted(set(self.job) - {"prompt_column", "messages_column"})
            if extra:
                raise UsageError(f"{where}: {', '.join(extra)} needs a model; a stage without one only transforms "
                                 f"rows (filter, explode, rank_by/keep_top, dedup, templates)")
            return
        if (self.template or self.messages) and self.task not in TEMPLATED_TASKS:
            raise UsageError(f"{where}: task {self.task} reads several columns; a template fills one prompt, "
                             f"for tasks {', '.join(TEMPLATED_TASKS)}")
        self.job_config(Path("input-table.jsonl"), Path(self.name))  # the job's own checks, before anything runs

    @property
    def prompt_target(self) -> str:
        """The column a template writes: the stage's prompt (or messages) column."""
        if self.messages is not None:
            return self.job.get("messages_column") or "messages"
        return self.job.get("prompt_column", "prompt")

    def sample_columns(self, upstream: list[str]) -> list[str]:
        """The columns that hold one entry per sample in this stage's model output (n > 1), or, for a pure
        transform, in its input's; explode turns them into one row each."""
        if not self.has_model:
            return upstream
        config = self.job_config(Path("input-table.jsonl"), Path(self.name))
        if not config.list_outputs:
            return []
        task = TASKS[config.task]
        single, lists = task.result_types(False), task.result_types(True)
        return [name for name in lists if lists[name] != single[name]]

    def template_part(self) -> dict[str, Any]:
        """What decides the stage's input table beside its input: its template and where it writes."""
        return {"prompt_template": self.own.prompt_template, "messages_template": self.own.messages_template,
                "target": self.prompt_target}

    def describe(self) -> dict[str, Any]:
        """Everything that decides the stage's output besides its input: its cache key's settings part."""
        return {"stage": dataclasses.asdict(self.own), "job": self.job}
