"""Stream Parquet files in record batches, never holding more than one batch of a file."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq

from bulkinfer.runner.rows import SourceRow
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import Source


def count_rows(path: Path) -> int:
    return pq.ParquetFile(path).metadata.num_rows


def columns(path: Path) -> list[str]:
    return pq.ParquetFile(path).schema_arrow.names


def read_parquet(source: Source, start: int, done: RowSet, batch_rows: int) -> Iterator[SourceRow]:
    """Rows numbered from `start`; a batch whose rows are all in `done` is not even converted."""
    index = start
    for batch in pq.ParquetFile(source.path).iter_batches(batch_size=batch_rows):
        stop = index + batch.num_rows
        if not done.contains_all(index, stop):
            for offset, values in enumerate(batch.to_pylist()):
                row = index + offset
                if row not in done:
                    yield SourceRow(row, values, f"{source.name} row {row - start + 1}")
        index = stop
