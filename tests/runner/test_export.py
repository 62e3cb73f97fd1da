import gzip
import json
import random
from pathlib import Path

import pytest
from runner_files import committed_job, read_results

from bulkinfer.errors import UsageError
from bulkinfer.runner.export import export_job
from bulkinfer.runner.outdir.result_files import ResultFiles


def _result(index: int) -> dict:
    failed = index % 5 == 0
    return {"row_index": index, "prompt": f"p{index}", "generated_text": None if failed else f"g{index}",
            "error": f"bad {index}" if failed else None}


def _job(root: Path, shards: list[list[int]], rows_total: int, fmt: str = "parquet") -> Path:
    """A job directory whose ledger commits the given shards (lists of row positions)."""
    return committed_job(root, [[_result(i) for i in rows] for rows in shards], rows_total, fmt)


@pytest.mark.parametrize("fmt, destination", [("parquet", "out.parquet"), ("jsonl", "out.jsonl"),
                                              ("parquet", "out.jsonl.gz")])
def test_export_writes_every_row_once_in_input_order(tmp_path: Path, fmt: str, destination: str) -> None:
    order = list(range(57))
    random.Random(1).shuffle(order)
    shards = [order[i:i + 10] for i in range(0, 57, 10)]
    out = _job(tmp_path / "job", shards, rows_total=57, fmt=fmt)
    result = export_job(out, tmp_path / destination, chunk_rows=16)
    assert (result.rows, result.rows_failed) == (57, 12)
    if destination.endswith(".gz"):
        rows = [json.loads(line) for line in gzip.open(tmp_path / destination, "rt")]
    else:
        rows = read_results(tmp_path / destination)
    assert rows == [_result(i) for i in range(57)]


def test_an_unfinished_job_exports_only_with_partial(tmp_path: Path) -> None:
    out = _job(tmp_path / "job", [[0, 2]], rows_total=4)
    with pytest.raises(UsageError, match=r"not complete \(2 of 4 rows\)"):
        export_job(out, tmp_path / "out.parquet")
    assert export_job(out, tmp_path / "out.parquet", partial=True).rows == 2
    assert [row["row_index"] for row in read_results(tmp_path / "out.parquet")] == [0, 2]


def test_shard_files_the_ledger_does_not_list_are_not_exported(tmp_path: Path) -> None:
    out = _job(tmp_path / "job", [[0, 1]], rows_total=2)
    ResultFiles(out / "shards").write(2, [_result(1)])  # written, but the crash came before the ledger line
    assert [row["row_index"] for row in read_results(_export(out, tmp_path))] == [0, 1]


def test_bad_destinations_are_usage_errors(tmp_path: Path) -> None:
    out = _job(tmp_path / "job", [[0]], rows_total=1)
    for destination, message in [("out.csv", "name it .parquet or .jsonl"), ("out.parquet.gz", "name it .parquet"),
                                 ("missing/out.jsonl", "no such directory")]:
        with pytest.raises(UsageError, match=message):
            export_job(out, tmp_path / destination)
    with pytest.raises(UsageError, match="not a bulkinfer output directory"):
        export_job(tmp_path, tmp_path / "out.jsonl")


def _export(out: Path, tmp_path: Path) -> Path:
    destination = tmp_path / "exported.parquet"
    export_job(out, destination)
    return destination
