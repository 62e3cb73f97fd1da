"""A job of a thinking model resumes after SIGKILL like any job: every row once, the reasoning columns in
every result file, the same rows as an uninterrupted run."""

from pathlib import Path

import pytest
from runner_files import read_results, write_jsonl
from subprocess_job import SETTINGS, killed_and_resumed

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

pytestmark = pytest.mark.slow  # child processes killed and resumed

ROWS = 40
FLAGS = ("--messages-column", "messages", "--thinking-budget", "3", "--max-tokens", "8")


@pytest.fixture(scope="module")
def r1_dir(checkpoint_factory) -> Path:
    return checkpoint_factory("llama", tokenizer="deepseek_r1")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    rows = [{"messages": [{"role": "user", "content": f"question {i}: why?"}]} for i in range(ROWS)]
    return write_jsonl(tmp_path_factory.mktemp("reasoning") / "in.jsonl", rows)


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


def test_a_thinking_job_resumes_after_sigkill(tmp_path: Path, data: Path, r1_dir: Path) -> None:
    settings = {**SETTINGS, "max_tokens": 8, "thinking_budget": 3, "messages_column": "messages"}
    run_job(JobConfig.from_settings(model=str(r1_dir), input=[str(data)], output=str(tmp_path / "base"),
                                    **settings))
    baseline = _exported(tmp_path / "base")
    out = tmp_path / "out"
    killed_and_resumed(r1_dir, data, out, FLAGS, seed=7)
    rows = _exported(out)
    assert [row["row_index"] for row in rows] == list(range(ROWS))
    assert rows == baseline
    # Every file has the reasoning columns; a random model may close its thinking before the budget does.
    assert all(row["reasoning_tokens"] <= 3 and row["generated_reasoning"] is not None for row in rows)
    assert any(row["reasoning_tokens"] == 3 for row in rows)
