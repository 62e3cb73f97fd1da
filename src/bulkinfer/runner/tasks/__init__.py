"""A job's tasks, by name: the registry everything that lists tasks is derived from.

To add a task, write its module (a class following tasks/base.py's Task) and add it to TASKS below, and
its name to JobConfig's task choices (runner/config.py, which cannot import this package).
"""

from __future__ import annotations

import pyarrow as pa

from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.tasks.base import EngineFacts, Task
from bulkinfer.runner.tasks.generate import GenerateTask
from bulkinfer.runner.tasks.pooling import ClassifyTask, EmbedTask, RerankTask, RewardTask
from bulkinfer.runner.tasks.score import ChoiceTask, ScoreTask

TASKS: dict[str, type[Task]] = {
    "generate": GenerateTask,
    "score": ScoreTask,
    "choice": ChoiceTask,
    "embed": EmbedTask,
    "classify": ClassifyTask,
    "reward": RewardTask,
    "rerank": RerankTask,
}


def make_task(config: JobConfig, engine: EngineFacts) -> Task:
    return TASKS[config.task](config, engine)


def result_columns(task: str) -> tuple[str, ...]:
    """The columns the task adds after the input columns of every output row, in this order."""
    return tuple(TASKS[task].result_types(False))


def result_types(task: str, list_outputs: bool) -> dict[str, pa.DataType]:
    return TASKS[task].result_types(list_outputs)


def declared_types(task: str) -> dict[str, pa.DataType]:
    """The task's result columns whose type is the same in every job of it, so that a column with no
    value in a file (no row failed: `error` all null) keeps its type there and several jobs' files
    concatenate."""
    single, lists = TASKS[task].result_types(False), TASKS[task].result_types(True)
    return {name: t for name, t in single.items() if lists[name] == t}


def reserved_columns(task: str) -> tuple[str, ...]:
    """The names the task's output needs for itself, so its input may not use them."""
    return (ROW_INDEX, *result_columns(task))


def input_columns(config: JobConfig) -> list[tuple[str, str]]:
    """(setting, column) pairs that every input must have."""
    needed = TASKS[config.task].input_columns(config)
    if config.id_column:
        needed.append(("id_column", config.id_column))
    return needed + [(f"param_columns.{param}", column) for param, column in config.param_columns.items()]
