"""The columns a job adds to every row, which its input therefore may not use."""

from __future__ import annotations

from collections.abc import Collection

# The key of every row: its position across all inputs. Result files, the ledger and export use it.
ROW_INDEX = "row_index"
# The result columns that only this task writes, in output order (see result_columns).
TASK_COLUMNS = {
    "generate": ("generated_text", "finish_reason"),
    "score": ("logprob", "is_greedy"),
    "choice": ("choice_logprobs", "choice_logprobs_norm", "choice", "choice_norm"),
}

# generate's columns that a job has only when some row may need them (see JobConfig.wants).
OPTIONAL_COLUMNS = ("generated_json", "logprobs", "prompt_logprobs")


def result_columns(task: str) -> tuple[str, ...]:
    """The columns the task adds after the input columns of every output row, in this order."""
    if task == "generate":
        return (*TASK_COLUMNS[task], "prompt_tokens", "completion_tokens", "error", *OPTIONAL_COLUMNS)
    return (*TASK_COLUMNS[task], "prompt_tokens", "error")


def reserved_columns(task: str) -> tuple[str, ...]:
    """The names the task's output needs for itself, so its input may not use them."""
    return (ROW_INDEX, *result_columns(task))


def reserved_clash(columns: Collection[str], reserved: tuple[str, ...]) -> str | None:
    """The first of the reserved names that is also an input column, if any."""
    return next((name for name in reserved if name in columns), None)
