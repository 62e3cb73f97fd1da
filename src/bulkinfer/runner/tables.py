"""Rows (dicts, possibly with uneven keys and types, as JSONL gives them) to Arrow tables, and back.

A column whose values Arrow cannot hold in one type (a JSONL key that is a number on one line and a
string on another) becomes a text column rather than being dropped or refused: strings stay as they
are and other values are written as JSON, the same way in every shard, so shards still line up.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import pyarrow as pa

from bulkinfer.runner.jsonl_writer import json_default
from bulkinfer.runner.rows import ROW_INDEX


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    names = list(dict.fromkeys(name for row in rows for name in row))
    return pa.table({name: _column([row.get(name) for row in rows]) for name in names})


def unified_schema(schemas: Iterable[pa.Schema], results: tuple[str, ...]) -> pa.Schema:
    """One schema all the given ones fit into: row_index, input columns, then those of `results`
    (the task's result columns, see rows.result_columns) that the shards hold, in that order."""
    types: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for field in schema:
            types.setdefault(field.name, []).append(field.type)
    inputs = [name for name in types if name != ROW_INDEX and name not in results]
    ordered = [ROW_INDEX, *inputs, *(name for name in results if name in types)]
    return pa.schema([(name, _common_type(types.get(name, [pa.int64()]))) for name in ordered])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table with exactly the schema's columns, in its order; missing columns are null."""
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
        elif table.schema.field(field.name).type == field.type:
            columns.append(table.column(field.name))
        else:
            columns.append(_cast(table.column(field.name), field.type))
    return pa.table(columns, schema=schema)


def _column(values: list[Any]) -> pa.Array:
    try:
        array = pa.array(values)
        if _storable(array.type):
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
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        if target != pa.string():
            raise
        return _as_text(column.to_pylist())


def _as_text(values: list[Any]) -> pa.Array:
    return pa.array([v if v is None or isinstance(v, str) else json.dumps(v, default=json_default)
                     for v in values], pa.string())


def _storable(data_type: pa.DataType) -> bool:
    """Parquet cannot store a struct with no fields (what `{}` in JSON becomes)."""
    if pa.types.is_struct(data_type):
        return data_type.num_fields > 0 and all(_storable(f.type) for f in data_type)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return _storable(data_type.value_type)
    return True
