"""Small builders shared by the runner tests: input files and reading results back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bulkinfer.runner.outdir.layout import JobDir, new_manifest
from bulkinfer.runner.outdir.ledger import Commit, Ledger, make_commit, read_records
from bulkinfer.runner.outdir.result_files import ResultFiles
from bulkinfer.runner.shards import WHOLE


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


def committed_job(root: Path, files: list[list[dict[str, Any]]], rows_total: int, fmt: str = "parquet") -> Path:
    """An output directory whose ledger commits one result file per list of rows (dicts with a row_index)."""
    directory = JobDir(root)
    directory.create_root()
    directory.write_manifest(new_manifest({}, [], rows_total, WHOLE))
    store, ledger = ResultFiles(directory.results_path, fmt), Ledger(directory.ledger_path)
    for seq, rows in enumerate(files, 1):
        written = store.write(seq, rows)
        ids = [row["row_index"] for row in rows]
        ledger.append(make_commit(seq, written.name, ids, written.errors, written.size, written.digest))
    ledger.close()
    return root
