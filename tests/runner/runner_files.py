"""Small builders shared by the runner tests: input files and reading results back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bulkinfer.runner.outdir.ledger import Commit, read_records


def write_jsonl(path: Path, rows: list[Any], blank_every: int = 0) -> Path:
    """Rows may be dicts (written as JSON) or bytes/str (written as the raw line)."""
    with open(path, "wb") as handle:
        for number, row in enumerate(rows, 1):
            if isinstance(row, bytes):
                handle.write(row + b"\n")
            elif isinstance(row, str):
                handle.write(row.encode() + b"\n")
            else:
                handle.write(json.dumps(row).encode() + b"\n")
            if blank_every and number % blank_every == 0:
                handle.write(b"   \n")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def read_results(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines()]


def prompts(count: int) -> list[dict[str, Any]]:
    """Prompts of varied lengths, some sharing a prefix, so binning and prefix caching both do something."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    rows = []
    for i in range(count):
        prefix = "Answer briefly. " if i % 3 == 0 else ""
        body = " ".join(words[(i + k) % len(words)] for k in range(1 + i % 7))
        rows.append({"prompt": f"{prefix}{body} {i}", "k": i})
    return rows


def committed(ledger: Path) -> list[Commit]:
    """Every commit record of a ledger, in order, voided ones included."""
    return [record for record in read_records(ledger) if isinstance(record, Commit)]
