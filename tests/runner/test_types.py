"""Pass-through columns keep their type and value exactly; JSON gets valid JSON for NaN and infinities."""

from __future__ import annotations

import decimal
import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

COLUMNS = {
    "when": pa.array([1, 2, 3], pa.timestamp("ns")),
    "day": pa.array([0, 1, 2], pa.date32()),
    "at": pa.array([1, 2, 3], pa.time64("ns")),
    "took": pa.array([1, 2, 3], pa.duration("ns")),
    "price": pa.array([decimal.Decimal("1.50"), decimal.Decimal("12345678901234567890.25"), None],
                      pa.decimal128(30, 2)),
    "tags": pa.array([[("a", 1)], [("b", 2), ("c", 3)], []], pa.map_(pa.string(), pa.int64())),
    "score": pa.array([1.5, math.nan, math.inf]),
}


@pytest.fixture
def job(tmp_path: Path, tiny_llama: Path) -> Path:
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt": ["1+1=", "2+2=", "3+3="], **COLUMNS}), data)
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "out"),
                                     max_tokens=2, temperature=0.0)
    assert run_job(config).complete
    return tmp_path / "out"


def test_parquet_columns_keep_their_types_and_values(job: Path, tmp_path: Path) -> None:
    export_job(job, tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    for name, column in COLUMNS.items():
        assert table.schema.field(name).type == column.type, name
        got = table.column(name).combine_chunks()
        assert got.equals(column) or repr(got.to_pylist()) == repr(column.to_pylist()), name  # NaN != NaN


def test_json_export_is_valid_json_with_nan_and_infinity_as_null(job: Path, tmp_path: Path) -> None:
    export_job(job, tmp_path / "out.jsonl")
    text = (tmp_path / "out.jsonl").read_text()
    rows = [json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} is not JSON")) for line in
            text.splitlines()]
    assert [row["score"] for row in rows] == [1.5, None, None]
    assert rows[0]["when"].endswith("00.000000001") and rows[2]["when"].endswith("00.000000003")


def test_a_failed_export_leaves_no_temporary_file(job: Path, tmp_path: Path) -> None:
    next((job / "shards").iterdir()).write_bytes(b"not parquet")
    with pytest.raises(Exception):
        export_job(job, tmp_path / "out.parquet")
    assert not list(tmp_path.glob(".tmp-*"))


def _export_of(tmp_path: Path, tiny_llama: Path, name: str, prompts: list[str]) -> pa.Table:
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / name),
                                     max_tokens=2, temperature=0.0, max_model_len=32)
    run_job(config)
    export_job(tmp_path / name, tmp_path / f"{name}.parquet")
    return pq.read_table(tmp_path / f"{name}.parquet")


def test_result_columns_keep_their_types_when_no_row_has_a_value(tmp_path: Path, tiny_llama: Path) -> None:
    clean = _export_of(tmp_path, tiny_llama, "clean", ["1+1=", "2+2="])
    failing = _export_of(tmp_path, tiny_llama, "failing", ["1+1=", "9" * 200])  # longer than max_model_len
    assert clean.column("error").null_count == 2 and failing.column("error").null_count == 1
    assert clean.schema.field("error").type == pa.string()
    assert pa.concat_tables([clean, failing]).num_rows == 4  # the same schema: no promotion needed
