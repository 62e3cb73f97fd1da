"""An input may not use a column name that its job's output writes; the names depend on the task."""

from pathlib import Path

import pytest
from runner_files import read_results, write_jsonl, write_parquet

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.open_job import open_job

FAST = dict(max_tokens=2, temperature=0.0, max_num_seqs=8, window_rows=8, shard_rows=6, commit_seconds=0.5,
            max_model_len=64)
GENERATE_COLUMNS = ["generated_text", "finish_reason", "prompt_tokens", "completion_tokens", "error"]
# More good rows than check_columns samples, so the clash further down reaches the reader.
SAMPLED_ROWS = 100


def _run(tmp_path: Path, model: Path, inputs: list[Path], **settings) -> list[dict]:
    config = JobConfig.from_settings(model=str(model), input=[str(p) for p in inputs], output=str(tmp_path / "out"),
                                     **{**FAST, **settings})
    outcome = run_job(config)
    assert outcome.complete
    export_job(tmp_path / "out", tmp_path / "out.parquet")
    return read_results(tmp_path / "out.parquet")


def test_generation_passes_scoring_column_names_through(tmp_path: Path, tiny_llama: Path) -> None:
    rows = [{"prompt": f"say {i}", "choice": i, "logprob": -0.5 * i, "k": i} for i in range(6)]
    jsonl = write_jsonl(tmp_path / "in.jsonl", rows[:3])
    parquet = write_parquet(tmp_path / "in.parquet", rows[3:])
    results = _run(tmp_path, tiny_llama, [jsonl, parquet])
    assert list(results[0]) == ["row_index", "prompt", "choice", "logprob", "k", *GENERATE_COLUMNS]
    assert [{name: row[name] for name in rows[0]} for row in results] == rows
    assert all(row["error"] is None and row["generated_text"] is not None for row in results)


@pytest.mark.parametrize("writer", [write_parquet, write_jsonl])
def test_a_score_job_refuses_an_input_column_named_logprob(tmp_path: Path, tiny_llama: Path, writer) -> None:
    suffix = ".parquet" if writer is write_parquet else ".jsonl"
    data = writer(tmp_path / f"in{suffix}", [{"context": "a", "continuation": " b", "logprob": 1.0}])
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "out"),
                                     task="score")
    with pytest.raises(UsageError, match=f"^in{suffix}: column 'logprob' has the name of an output column; "
                                         f"rename it in the input$"):
        open_job(config)
    assert not (tmp_path / "out").exists()


def test_a_score_job_gives_a_later_jsonl_row_named_logprob_an_error_row(tmp_path: Path, tiny_llama: Path) -> None:
    good = [{"context": "a", "continuation": " b"}] * SAMPLED_ROWS
    data = write_jsonl(tmp_path / "in.jsonl", [*good, {"context": "a", "continuation": " b", "logprob": 1.0}])
    results = _run(tmp_path, tiny_llama, [data], task="score")
    assert all(row["error"] is None for row in results[:SAMPLED_ROWS])
    last = results[SAMPLED_ROWS]
    assert last["error"] == f"in.jsonl line {SAMPLED_ROWS + 1}: has a key 'logprob', which is also an output column"
    assert last["logprob"] is None
