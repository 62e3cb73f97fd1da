"""Rows as Arrow tables and JSON lines, by one rule whichever rows share a result file.

Rows are dicts, possibly with uneven keys and types, as JSONL gives them. Columns of a Parquet input
keep its Arrow types exactly (`input_types`: nanosecond timestamps, decimals, maps). Any other
column whose values Arrow cannot hold in one type (a JSONL key that is a number on one line and a
string on another) becomes a text column rather than being dropped or refused: strings stay as they
are and other values are written as JSON, the same way in every file, so the files still line up.
In JSON, NaN and infinities are written as null.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any, Iterable

import pyarrow as pa

from bulkinfer.runner.columns import ROW_INDEX


def json_line(row: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(row, ensure_ascii=False, default=json_default, allow_nan=False)
    except ValueError:  # NaN or an infinity, which JSON has no form for
        text = json.dumps(_finite(row), ensure_ascii=False, default=json_default, allow_nan=False)
    return (text + "\n").encode("utf-8")


def _finite(value: Any) -> Any:
    """The value with every NaN and infinity made None, however deep."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _canonical(value: Any) -> Any:
    """The value as a text column writes it, whichever rows shared its file: where ints and floats met,
    Arrow holds them all as floats, and where dicts met, each holds every key of the others, as null.
    So whole-number floats are ints and null members are left out, however deep."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= _EXACT else value
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [_canonical(item) for item in value]
    return value


_EXACT = 2 ** 53  # beyond it, Arrow refuses to hold an int as a float


def _has_empty_dict(value: Any) -> bool:
    if isinstance(value, dict):
        return not value or any(_has_empty_dict(item) for item in value.values())
    return isinstance(value, (list, tuple)) and any(_has_empty_dict(item) for item in value)


def json_default(value: Any) -> Any:
    """Values Parquet inputs may hold that JSON has no type for: bytes as base64, the rest as text."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def rows_to_table(rows: list[dict[str, Any]], types: dict[str, pa.DataType] | None = None) -> pa.Table:
    """`types`: the Arrow type of columns whose values came from a Parquet input, kept exactly."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    return pa.table({name: _column([row.get(name) for row in rows], (types or {}).get(name)) for name in names})


def unified_schema(schemas: Iterable[pa.Schema], results: tuple[str, ...],
                   declared: dict[str, pa.DataType] | None = None) -> pa.Schema:
    """One schema all the given ones fit into: row_index, input columns, then those of `results`
    (the task's result columns, see tasks.result_columns) that the files hold, in that order.
    A column with no value in any file (type null: files written before result types were declared)
    takes its `declared` type, so that it is the same whichever rows the job had."""
    types: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for field in schema:
            types.setdefault(field.name, []).append(field.type)
    inputs = [name for name in types if name != ROW_INDEX and name not in results]
    ordered = [ROW_INDEX, *inputs, *(name for name in results if name in types)]
    common = {name: _common_type(types.get(name, [pa.int64()])) for name in ordered}
    return pa.schema([(name, (declared or {}).get(name, t) if pa.types.is_null(t) else t) for name, t in common.items()])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table with exactly the schema's columns, in its order; missing columns are null."""
    return widened([narrowed(table, schema)], schema)


def narrowed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Only the table's columns that hold a value (row_index always), each of the schema's type: rows with
    thousands of distinct JSONL keys are mostly nulls, which need not be held."""
    types = dict(zip(schema.names, schema.types))
    return pa.table({name: column if column.type == types[name] else _cast(column, types[name])
                     for name, column in zip(table.column_names, table.columns)
                     if name == ROW_INDEX or column.null_count < len(column)})


def widened(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """The tables one after another, with exactly the schema's columns in its order. A column a table
    lacks is null there, from one array per type and length: 20,000 absent keys cost no memory."""
    nulls: dict[tuple[pa.DataType, int], pa.Array] = {}
    present = [dict(zip(table.column_names, table.columns)) for table in tables]
    columns = []
    for field in schema:
        chunks = []
        for table, columns_of in zip(tables, present):
            column = columns_of.get(field.name)
            if column is None:
                column = nulls.setdefault((field.type, table.num_rows), pa.nulls(table.num_rows, field.type))
                chunks.append(column)
            else:
                chunks.extend(column.chunks)
        columns.append(pa.chunked_array(chunks, field.type))
    return pa.table(columns, schema=schema)


def _column(values: list[Any], declared: pa.DataType | None = None) -> pa.Array:
    if declared is not None:
        try:
            return pa.array(values, declared)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # a JSONL input's values under the same name: inferred like any other column
    try:
        array = pa.array(values)
        if _storable(array.type) and not _fills_empty_dicts(array.type, values):
            return array
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    return _as_text(values)


def _common_type(types: list[pa.DataType]) -> pa.DataType:
    try:
        schemas = [pa.schema([("column", t)]) for t in types]
        return pa.unify_schemas(schemas, promote_options="permissive").field("column").type
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.string()


def _cast(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray | pa.Array:
    # Text from the values themselves, never Arrow's cast (2.0 -> "2", where a file that also held a
    # string wrote "2.0"): a row's text must not depend on which rows shared its file.
    return _as_text(column.to_pylist()) if target == pa.string() else column.cast(target)


def fits(column: pa.ChunkedArray, target: pa.DataType) -> bool:
    """Whether every value of the column can be held as `target`: an int beyond 2**53 cannot be a float."""
    try:
        column.cast(target)
        return True
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return False


def _as_text(values: list[Any]) -> pa.Array:
    """A column's values as text, the one rule for a column whose values have no type in common:
    strings as they are, anything else as JSON of its canonical form (2.0 as 2, no null members)."""
    return pa.array([v if v is None or isinstance(v, str) else json.dumps(_canonical(v), default=json_default)
                     for v in values], pa.string())


def _storable(data_type: pa.DataType) -> bool:
    """Parquet cannot store a struct with no fields (what `{}` in JSON becomes)."""
    if pa.types.is_struct(data_type):
        return data_type.num_fields > 0 and all(_storable(f.type) for f in data_type)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return _storable(data_type.value_type)
    return True


def _fills_empty_dicts(data_type: pa.DataType, values: list[Any]) -> bool:
    """Whether an empty dict sits among others: here it would hold their keys as nulls, and in a file
    of its own it is text, `{}`; as text in both, it does not depend on which rows shared its file."""
    return _has_struct(data_type) and any(_has_empty_dict(value) for value in values)


def _has_struct(data_type: pa.DataType) -> bool:
    return pa.types.is_struct(data_type) or (
        (pa.types.is_list(data_type) or pa.types.is_large_list(data_type)) and _has_struct(data_type.value_type))
