"""Result files: rows written to Parquet or JSONL, durably, and read back by position.

A file is written to a temporary name, fsynced, then renamed into place. It only counts once the
ledger records it; files the ledger does not know (left by a crash between rename and ledger
append, or mid-write) are deleted on the next start.

Rows are dicts, possibly with uneven keys and types, as JSONL gives them. A column whose values
Arrow cannot hold in one type (a JSONL key that is a number on one line and a string on another)
becomes a text column rather than being dropped or refused: strings stay as they are and other
values are written as JSON, the same way in every file, so the files still line up.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bulkinfer.durable import publish, sync_dir, sync_file
from bulkinfer.runner.columns import ROW_INDEX

EXTENSIONS = {"parquet": ".parquet", "jsonl": ".jsonl"}


class ResultFiles:
    """The results folder of one job (or one shard of it)."""

    def __init__(self, directory: Path, fmt: str = "parquet") -> None:
        self.directory = directory
        self.format = fmt

    def write(self, seq: int, rows: list[dict[str, Any]]) -> str:
        """Write rows durably as file number `seq`; returns the file name to record in the ledger."""
        name = f"shard-{seq:06d}{EXTENSIONS[self.format]}"
        tmp = self.directory / f".{name}.tmp"
        rows = sorted(rows, key=lambda row: row[ROW_INDEX])  # so export's range reads touch few row groups
        with open(tmp, "wb") as handle:
            if self.format == "parquet":
                pq.write_table(rows_to_table(rows), handle)
            else:
                handle.writelines(json_line(row) for row in rows)
            sync_file(handle)
        publish(tmp, self.directory / name)
        return name

    def schema(self, name: str) -> pa.Schema:
        path = self.directory / name
        return pq.read_schema(path) if path.suffix == ".parquet" else _read_jsonl(path).schema

    def read_range(self, name: str, start: int, stop: int) -> pa.Table:
        """The file's rows with positions in [start, stop)."""
        path = self.directory / name
        if path.suffix == ".parquet":
            return pq.read_table(path, filters=[(ROW_INDEX, ">=", start), (ROW_INDEX, "<", stop)])
        table = _read_jsonl(path)
        positions = table.column(ROW_INDEX)
        return table.filter(pc.and_(pc.greater_equal(positions, start), pc.less(positions, stop)))

    def remove_except(self, committed: set[str]) -> None:
        """Delete result and temporary files the ledger does not list."""
        removed = False
        for path in self.directory.iterdir():
            if path.name not in committed:
                path.unlink()
                removed = True
        if removed:
            sync_dir(self.directory)


def json_line(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, ensure_ascii=False, default=json_default) + "\n").encode("utf-8")


def json_default(value: Any) -> Any:
    """Values Parquet inputs may hold that JSON has no type for: bytes as base64, the rest as text."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    names = list(dict.fromkeys(name for row in rows for name in row))
    return pa.table({name: _column([row.get(name) for row in rows]) for name in names})


def unified_schema(schemas: Iterable[pa.Schema], results: tuple[str, ...]) -> pa.Schema:
    """One schema all the given ones fit into: row_index, input columns, then those of `results`
    (the task's result columns, see columns.result_columns) that the files hold, in that order."""
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


def _read_jsonl(path: Path) -> pa.Table:
    with open(path, "rb") as handle:
        return rows_to_table([json.loads(line) for line in handle])


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
