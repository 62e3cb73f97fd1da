"""What a stage does to rows besides running a model, in this order: `explode` (one row per sample of
an n > 1 generation), `filter` (keep the rows an expression holds for), `rank_by` + `keep_top` (the K
best rows of each source row: best-of-n) and `dedup` (dedup.py).

They act on a stage's sound rows; a row with an error passes through unchanged, so it stays visible in
this stage's output, and no later stage reads it. Each is a plain function of the rows, so a stage's
output is the same however often it is computed.
"""

from __future__ import annotations

from typing import Any, Iterable

from bulkinfer.runner.pipeline.expression import Expression, RowError

SOURCE_ROW = "source_row"  # the pipeline input row a row comes from, through every explode
OUTPUT_INDEX = "output_index"  # which of its source row's samples a row holds, after explode
ERROR = "error"

Row = dict[str, Any]


def is_sound(row: Row) -> bool:
    return row.get(ERROR) is None


def explode(rows: Iterable[Row], sample_columns: list[str]) -> list[Row]:
    """Each row becomes one row per sample: the i-th element of each of `sample_columns` it has, output_index i."""
    exploded = []
    for row in rows:
        present = [column for column in sample_columns if column in row]
        samples = [row[column] for column in present]
        lengths = {len(values) for values in samples if isinstance(values, list)}
        if not is_sound(row) or not lengths:
            exploded.append(row)
            continue
        for index in range(max(lengths)):
            sample = {column: _item(values, index) for column, values in zip(present, samples)}
            exploded.append({**row, **sample, OUTPUT_INDEX: index})
    return exploded


def _item(values: Any, index: int) -> Any:
    return values[index] if isinstance(values, list) and index < len(values) else None


def keep_where(rows: Iterable[Row], expression: Expression) -> list[Row]:
    """The rows the expression holds for; a row it cannot be evaluated on becomes an error row."""
    kept = []
    for row in rows:
        if not is_sound(row):
            kept.append(row)
            continue
        try:
            if expression.holds(row):
                kept.append(row)
        except RowError as exc:
            kept.append({**row, ERROR: str(exc)})
    return kept


def keep_top(rows: list[Row], rank_by: str, top: int) -> list[Row]:
    """Of each source row's rows, the `top` with the highest `rank_by` (ties: the earlier row), in their
    order; a row with no number there ranks last."""
    groups: dict[Any, list[int]] = {}
    for position, row in enumerate(rows):
        if is_sound(row):
            groups.setdefault(row.get(SOURCE_ROW, position), []).append(position)
    kept = {position for group in groups.values()
            for position in sorted(group, key=lambda at: _rank_key(rows[at].get(rank_by), at))[:top]}
    return [row for position, row in enumerate(rows) if position in kept or not is_sound(row)]


def _rank_key(value: Any, position: int) -> tuple:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (not number, -value if number else 0, position)
