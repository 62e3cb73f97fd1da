"""The columns a job adds to every row, which its input therefore may not use."""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

# The key of every row: its position across all inputs. Result files, the ledger and export use it.
ROW_INDEX = "row_index"
# The result columns that only this task writes, in output order (see result_columns).
TASK_COLUMNS = {
    "generate": ("generated_text", "finish_reason"),
    "score": ("logprob", "is_greedy"),
    "choice": ("choice_logprobs", "choice_logprobs_norm", "choice", "choice_norm"),
}

# generate's columns that a job has only when some row may need them (see JobConfig.wants), and a thinking
# model's, which a job has when its model has a reasoning parser (the same on every run of the job: the model's
# files and reasoning_parser are part of its fingerprint).
REASONING_COLUMNS = ("generated_reasoning", "reasoning_tokens")
OPTIONAL_COLUMNS = (*REASONING_COLUMNS, "generated_json", "tool_calls", "logprobs", "prompt_logprobs")


# Result columns whose Arrow type is the same in every job: declared, so that a column with no value in
# a file (no row failed: `error` all null) keeps its type there and the files of several jobs concatenate.
_TOKEN = pa.struct([("token_id", pa.int64()), ("logprob", pa.float64())])
_POSITIONS = pa.list_(pa.struct([("token_id", pa.int64()), ("logprob", pa.float64()),
                                 ("top_logprobs", pa.list_(_TOKEN))]))
FIXED_TYPES: dict[str, pa.DataType] = {
    "prompt_tokens": pa.int64(),
    "error": pa.string(),
    "prompt_logprobs": _POSITIONS,
    "logprob": pa.float64(),
    "is_greedy": pa.bool_(),
    "choice_logprobs": pa.list_(pa.float64()),
    "choice_logprobs_norm": pa.list_(pa.float64()),
    "choice": pa.int64(),
    "choice_norm": pa.int64(),
}
# A sample's tool calls, in OpenAI's order of fields; arguments is the JSON text the model wrote.
_TOOL_CALLS = pa.list_(pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())]))
# generate's columns of one value per sample: a list of these when a row may have n > 1.
_SAMPLE_TYPES = {"generated_text": pa.string(), "finish_reason": pa.string(), "completion_tokens": pa.int64(),
                 "generated_reasoning": pa.string(), "reasoning_tokens": pa.int64(), "generated_json": pa.string(),
                 "tool_calls": _TOOL_CALLS, "logprobs": _POSITIONS}


def result_types(task: str, list_outputs: bool) -> dict[str, pa.DataType]:
    """The Arrow type of each of the task's result columns; `list_outputs`: see JobConfig.list_outputs."""
    samples = {name: pa.list_(t) if list_outputs else t for name, t in _SAMPLE_TYPES.items()}
    types = {**FIXED_TYPES, **samples}
    return {name: types[name] for name in result_columns(task)}


def result_columns(task: str) -> tuple[str, ...]:
    """The columns the task adds after the input columns of every output row, in this order."""
    if task == "generate":
        # The reasoning beside the answer, its token count beside the output's.
        return ("generated_text", "generated_reasoning", "finish_reason", "prompt_tokens", "completion_tokens",
                "reasoning_tokens", "error", "generated_json", "tool_calls", "logprobs", "prompt_logprobs")
    return (*TASK_COLUMNS[task], "prompt_tokens", "error")


def reserved_columns(task: str) -> tuple[str, ...]:
    """The names the task's output needs for itself, so its input may not use them."""
    return (ROW_INDEX, *result_columns(task))


def reserved_clash(columns: Collection[str], reserved: tuple[str, ...]) -> str | None:
    """The first of the reserved names that is also an input column, if any."""
    return next((name for name in reserved if name in columns), None)
