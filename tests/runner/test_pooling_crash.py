"""An embed job resumes after SIGKILL like any job: every row once, the same embeddings as an uninterrupted
run."""

import random
from pathlib import Path

import pytest
from runner_files import read_results, write_jsonl
from subprocess_job import SETTINGS, killed_and_resumed

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

pytestmark = pytest.mark.slow  # child processes killed and resumed

ROWS = 96
FLAGS = ("--task", "embed", "--dimensions", "32")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    generator = random.Random(4)
    words = ["cat", "river", "seven", "mat", "quick", "answer", "sea", "night", "hello", "world"]
    rows = [{"prompt": " ".join(generator.choice(words) for _ in range(generator.randint(1, 40)))}
            for _ in range(ROWS)]
    rows[7] = {"prompt": ""}  # an error row, committed like the others
    return write_jsonl(tmp_path_factory.mktemp("embed") / "in.jsonl", rows)


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


def test_an_embed_job_resumes_after_sigkill(tmp_path: Path, data: Path, tiny_llama: Path) -> None:
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "base"),
                                    **SETTINGS, task="embed", dimensions=32))
    baseline = _exported(tmp_path / "base")
    out = tmp_path / "out"
    killed_and_resumed(tiny_llama, data, out, FLAGS, seed=6)
    rows = _exported(out)
    assert [row["row_index"] for row in rows] == list(range(ROWS))
    assert [row["error"] is None for row in rows] == [index != 7 for index in range(ROWS)]
    for row, expected in zip(rows, baseline):
        assert row["prompt_tokens"] == expected["prompt_tokens"]
        if expected["embedding"] is None:
            assert row["embedding"] is None
        else:
            assert row["embedding"] == pytest.approx(expected["embedding"], abs=1e-5)
