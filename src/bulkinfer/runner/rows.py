"""The row as read from the input, and the columns the runner adds to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The key of every row: its position across all inputs. Shards, the ledger and export use it.
ROW_INDEX = "row_index"
# Added after the input columns in every output row, in this order.
RESULT_COLUMNS = ("generated_text", "finish_reason", "logprob", "is_greedy", "choice_logprobs", "choice_logprobs_norm",
                  "choice", "choice_norm", "prompt_tokens", "completion_tokens", "error", "logprobs")
RESERVED_COLUMNS = (ROW_INDEX, *RESULT_COLUMNS)


@dataclass
class SourceRow:
    index: int
    values: dict[str, Any] | None  # the input columns; None when the row could not be read as an object
    where: str  # names the row for a person: "data.jsonl line 17", "part-0.parquet row 5"
    error: str | None = None  # why the row cannot run, when that is known from reading alone


def reserved_clash(columns: list[str] | set[str]) -> str | None:
    """The first input column whose name the output needs for itself, if any."""
    return next((name for name in RESERVED_COLUMNS if name in columns), None)
