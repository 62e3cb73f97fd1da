"""The task protocol: what a job computes for each row, in one class per task.

A task turns a window of input rows into the engine's requests (`prepare`) and each finished request
back into a result row (`collect`), and declares the columns it reads and writes. The loop, the
readers and the output directory know tasks only through this protocol, so a new task is one module,
its line in the registry and its name among the job's task choices (tasks/__init__.py says how).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from bulkinfer.outputs import RequestOutput
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.work import PreparedWindow, Work

Row = dict[str, Any]
# The result columns of every task, whose types do not depend on the job.
PROMPT_TOKENS = pa.int64()
ERROR = pa.string()


@dataclass(frozen=True)
class EngineFacts:
    """What a task needs to know of the loaded engine."""

    tokenizer: Any  # the task's own copy: the engine detokenizes with its tokenizer meanwhile
    max_model_len: int
    reasons: bool = False  # whether the model has a reasoning parser
    hidden_size: int = 0  # the width of an embedding that dimensions does not cut
    head: str = "lm"  # what sits on the model's decoder (ModelConfig.head): how a rerank pair is encoded


class Task(Protocol):
    """One task's rows: engine requests in, result rows out. Instances live in one job run."""

    ENGINE_TASK: str  # what one of its requests asks of the model (LLM.supported_tasks), checked before it loads
    # The exact Arrow type of each result column in this job's files, known once the engine is: an embedding's
    # width is the model's. result_types gives the same columns' types as every job of the task declares them.
    types: dict[str, pa.DataType]

    def __init__(self, config: JobConfig, engine: EngineFacts) -> None: ...

    @staticmethod
    def input_columns(config: JobConfig) -> list[tuple[str, str]]:
        """(setting, column) pairs of the columns each row needs, checked before the model loads."""

    @staticmethod
    def result_types(list_outputs: bool) -> dict[str, pa.DataType]:
        """Every result column the task may write, in output order after the input columns, with its
        Arrow type. `list_outputs`: see JobConfig.list_outputs."""

    def prepare(self, window: list[SourceRow]) -> PreparedWindow:
        """The window's requests in the order to send them, and the rows that cannot run. Runs in the
        prefetch thread."""

    def collect(self, work: Work, output: RequestOutput) -> Row | None:
        """The result row once every request of the row is back; None while some are still out."""

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> Row:
        """The result row of a row that could not run."""


def result_row(row: SourceRow, columns: Row) -> Row:
    """The row's index and input columns, then the computed ones."""
    return {ROW_INDEX: row.index, **(row.values or {}), **columns}
