import gzip
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runner_files import committed_job, read_results

from bulkinfer.errors import UsageError
from bulkinfer.runner.export import committed_rows, export_job
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


def test_committed_rows_are_read_in_order_a_chunk_at_a_time(tmp_path: Path) -> None:
    order = list(range(57))
    random.Random(2).shuffle(order)
    out = _job(tmp_path / "job", [order[i:i + 10] for i in range(0, 57, 10)], rows_total=57)
    tables = list(committed_rows(out, chunk_rows=16).tables)
    assert [table.num_rows for table in tables] == [16, 16, 16, 9]
    rows = pa.concat_tables(tables).select(["row_index", "prompt", "generated_text", "error"]).to_pylist()
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


MIXES = {  # a column's values, by what JSONL lines can mix in one key
    "float and text": [2.0, "two", 3.5, None],
    "int and float": [1, 2.5, 3, None],
    "int, float and text": [1, 2.5, "x", 4.0],
    "bool and int": [True, 1, False, 0],
    "bool and text": [True, "yes", None],
    "int beyond 2**53 and float": [2**60 + 1, 0.5, 7],
    "list and text": [[1, 2.5], "x", [3]],
    "list of mixed": [[1, "a"], [2.0], [None]],
    "dict and text": [{"a": 1}, {"a": 2.5, "b": "y"}, "x", None],
    "dicts with clashing keys": [{"a": 1}, {"a": "one"}, {"a": 2.0}],
    "dict and list": [{"a": [1]}, [1, 2]],
    "null and list": [None, [1.0], []],
    "empty and other dicts": [{}, {"a": 1}, {"b": {}}, {"b": {"c": 2}}],
    "dicts with null members": [{"a": None}, {"b": 1}, "x"],
}


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
@pytest.mark.parametrize("mix", MIXES)
def test_export_does_not_depend_on_how_rows_were_split_into_files(tmp_path: Path, mix: str, fmt: str) -> None:
    values = MIXES[mix]
    rows = [{"row_index": i, "value": values[i % len(values)], "error": None} for i in range(12)]
    exports = {}
    for rows_per_file in (1, 3, 12):
        files = [rows[start:start + rows_per_file] for start in range(0, 12, rows_per_file)]
        out = committed_job(tmp_path / f"job-{rows_per_file}", files, rows_total=12, fmt=fmt)
        for destination in ("out.jsonl", "out.parquet"):
            export_job(out, tmp_path / f"{rows_per_file}-{destination}")
            exports.setdefault(destination, set()).add((tmp_path / f"{rows_per_file}-{destination}").read_bytes())
    assert [len(contents) for contents in exports.values()] == [1, 1]


def test_a_float_column_with_text_writes_whole_numbers_as_integers(tmp_path: Path) -> None:
    rows = [{"row_index": 0, "value": 2.0, "error": None}, {"row_index": 1, "value": "two", "error": None},
            {"row_index": 2, "value": [2.0, 2.5], "error": None}]
    for name, files in [("apart", [[row] for row in rows]), ("together", [rows])]:
        export_job(committed_job(tmp_path / name, files, rows_total=3), tmp_path / f"{name}.jsonl")
        assert [row["value"] for row in read_results(tmp_path / f"{name}.jsonl")] == ["2", "two", "[2, 2.5]"]


def test_result_files_without_declared_types_export_their_empty_columns_typed(tmp_path: Path) -> None:
    # Files written before result columns had declared types hold an `error` with no value as type null.
    rows = [{"row_index": i, "prompt": f"p{i}", "generated_text": f"g{i}", "error": None} for i in range(3)]
    job = committed_job(tmp_path / "out", [rows], 3)
    assert pq.read_schema(next((job / "shards").glob("*.parquet"))).field("error").type == pa.null()
    export_job(job, tmp_path / "out.parquet")
    assert pq.read_schema(tmp_path / "out.parquet").field("error").type == pa.string()
