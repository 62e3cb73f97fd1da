"""What a stage does to rows besides running a model, in this order: `explode` (one row per sample of
an n > 1 generation), `filter` (keep the rows an expression holds for), `rank_by` + `keep_top` (the K
best rows of each source row: best-of-n) and `dedup` (dedup.py).

They take a stage's rows a batch at a time: explode and filter act on each batch alone, keep_top holds
one source row's rows, dedup the kept embeddings. They act on a stage's sound rows; a row with an error
passes through unchanged, so it stays visible in this stage's output, and no later stage reads it. Each is a plain function of the rows, so a stage's
output is the same however often it is computed.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from bulkinfer.runner.pipeline.expression import Expression, RowError

SOURCE_ROW = "source_row"  # the pipeline input row a row comes from, through every explode
OUTPUT_INDEX = "output_index"  # which of its source row's samples a row holds, after explode
ERROR = "error"

Row = dict[str, Any]
Batches = Iterator[list[Row]]  # a stage's rows in order, a bounded list at a time


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


def keep_top(batches: Iterable[list[Row]], rank_by: str, top: int) -> Batches:
    """Of each source row's rows, the `top` with the highest `rank_by` (ties: the earlier row), in their
    order; a row with no number there ranks last.

    A source row's rows are adjacent: the pipeline input's rows come in order, explode makes a row's
    samples consecutive, and every stage keeps its input's order. So one source row's rows are held at a
    time. Only an input that carries its own source_row column can break this; there, each run of equal
    source_row values is ranked on its own."""
    group: list[Row] = []  # the open source row's rows, and the error rows among them
    key: Any = object()
    for batch in batches:
        done: list[Row] = []
        for row in batch:
            if is_sound(row):
                # A row without a source_row is alone in its group, as if keyed by its position.
                own = row[SOURCE_ROW] if SOURCE_ROW in row else object()
                if own != key:
                    done.extend(_best(group, rank_by, top))
                    group, key = [], own
            group.append(row)
        yield done
    yield _best(group, rank_by, top)


def _best(group: list[Row], rank_by: str, top: int) -> list[Row]:
    """The group's `top` best sound rows and all its error rows, in their order."""
    sound = [at for at, row in enumerate(group) if is_sound(row)]
    kept = set(sorted(sound, key=lambda at: _rank_key(group[at].get(rank_by), at))[:top])
    return [row for at, row in enumerate(group) if at in kept or not is_sound(row)]


def _rank_key(value: Any, position: int) -> tuple:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (not number, -value if number else 0, position)
