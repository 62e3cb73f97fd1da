"""Result shards: each written to a temporary file, fsynced, then renamed into place.

A shard file only counts once the ledger records it; files the ledger does not know (left by a
crash between rename and ledger append, or mid-write) are deleted on the next start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bulkinfer.durable import publish, sync_dir, sync_file
from bulkinfer.runner.jsonl_writer import json_line
from bulkinfer.runner.rows import ROW_INDEX
from bulkinfer.runner.tables import rows_to_table

EXTENSIONS = {"parquet": ".parquet", "jsonl": ".jsonl"}


class ShardStore:
    def __init__(self, directory: Path, fmt: str = "parquet") -> None:
        self.directory = directory
        self.format = fmt

    def write(self, seq: int, rows: list[dict[str, Any]]) -> str:
        """Write rows durably as shard number `seq`; returns the file name to record in the ledger."""
        name = f"shard-{seq:06d}{EXTENSIONS[self.format]}"
        tmp = self.directory / f".{name}.tmp"
        rows = sorted(rows, key=lambda row: row[ROW_INDEX])  # so export's range reads touch few row groups
        self._write_file(tmp, rows)
        publish(tmp, self.directory / name)
        return name

    def schema(self, name: str) -> pa.Schema:
        path = self.directory / name
        return pq.read_schema(path) if path.suffix == ".parquet" else _read_jsonl(path).schema

    def read_range(self, name: str, start: int, stop: int) -> pa.Table:
        """The shard's rows with positions in [start, stop)."""
        path = self.directory / name
        if path.suffix == ".parquet":
            return pq.read_table(path, filters=[(ROW_INDEX, ">=", start), (ROW_INDEX, "<", stop)])
        table = _read_jsonl(path)
        positions = table.column(ROW_INDEX)
        return table.filter(pc.and_(pc.greater_equal(positions, start), pc.less(positions, stop)))

    def remove_except(self, committed: set[str]) -> None:
        """Delete shard and temporary files the ledger does not list."""
        removed = False
        for path in self.directory.iterdir():
            if path.name not in committed:
                path.unlink()
                removed = True
        if removed:
            sync_dir(self.directory)

    def _write_file(self, path: Path, rows: list[dict[str, Any]]) -> None:
        with open(path, "wb") as handle:
            if self.format == "parquet":
                pq.write_table(rows_to_table(rows), handle)
            else:
                handle.writelines(json_line(row) for row in rows)
            sync_file(handle)


def _read_jsonl(path: Path) -> pa.Table:
    with open(path, "rb") as handle:
        return rows_to_table([json.loads(line) for line in handle])
