"""The column every result row has whatever its task, and the check that an input does not use the
names a task's output needs (each task declares its own result columns: tasks/)."""

from __future__ import annotations

from collections.abc import Collection

# The key of every row: its position across all inputs. Result files, the ledger and export use it.
ROW_INDEX = "row_index"


def reserved_clash(columns: Collection[str], reserved: Collection[str]) -> str | None:
    """The first of the reserved names that is also an input column, if any."""
    return next((name for name in reserved if name in columns), None)
