"""A job whose rows each bring a JSON schema resumes after SIGKILL like any job: every row once, the
same rows as an uninterrupted run, bad schemas as error rows."""

import json
import random
from pathlib import Path

import jsonschema
import pytest
from runner_files import read_results, write_jsonl
from subprocess_job import SETTINGS, killed_and_resumed

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

pytestmark = pytest.mark.slow  # child processes killed and resumed

ROWS = 48
FLAGS = ("--param-column", "json_schema=schema", "--max-tokens", "24")
SCHEMAS = [
    {"type": "object", "properties": {"label": {"enum": ["a", "b", "c"]}}, "required": ["label"],
     "additionalProperties": False},
    {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}}, "required": ["n", "ok"],
     "additionalProperties": False},
    {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
    "{not json",
    {"type": "strin"},
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    # Schemas as JSON text: a column of objects whose keys differ from row to row would be written to each
    # result file as a struct of that file's keys, so its passthrough values would depend on the batching.
    texts = [schema if isinstance(schema, str) else json.dumps(schema) for schema in SCHEMAS]
    rows = [{"prompt": f"record {i}: fill it in", "schema": texts[i % len(texts)]} for i in range(ROWS)]
    random.Random(3).shuffle(rows)
    return write_jsonl(tmp_path_factory.mktemp("structured") / "in.jsonl", rows)


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


def test_a_per_row_schema_job_resumes_after_sigkill(tmp_path: Path, data: Path, tiny_llama: Path) -> None:
    settings = {**SETTINGS, "max_tokens": 24, "param_columns": {"json_schema": "schema"}}
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "base"),
                                    **settings))
    baseline = _exported(tmp_path / "base")
    out = tmp_path / "out"
    killed_and_resumed(tiny_llama, data, out, FLAGS, seed=5)
    rows = _exported(out)
    assert [row["row_index"] for row in rows] == list(range(ROWS))
    assert rows == baseline
    for row in rows:
        if row["error"] is not None:
            assert "not valid JSON" in row["error"] or "unsupported schema: " in row["error"]
        elif row["finish_reason"] == "stop":
            jsonschema.validate(json.loads(row["generated_json"]), json.loads(row["schema"]))
    bad = sum(not isinstance(SCHEMAS[i % len(SCHEMAS)], dict) or SCHEMAS[i % len(SCHEMAS)]["type"] == "strin"
              for i in range(ROWS))
    assert sum(row["error"] is not None for row in rows) == bad
