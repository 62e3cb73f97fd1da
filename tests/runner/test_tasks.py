"""The score and choice tasks: whole jobs against the real engine, checked against llm.loglikelihood."""

from pathlib import Path

import pytest
from runner_files import read_results, write_jsonl

from bulkinfer import LLM
from bulkinfer.cli.jobfile import read_job_file
from bulkinfer.cli.run import run_settings
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(dtype="float32", max_num_seqs=8, window_rows=4, shard_rows=3, commit_seconds=0.5, max_model_len=64)
PAIRS = [("The cat sat on", " the mat"), ("1+1=", "2"), ("Hello", " world, again"), ("", "start"),
         ("a b c", " d e f g")]
CHOICES = [("The sky is", [" blue", " green", " a color"]), ("2+2=", ["4", "5", "22"]), ("x", [" y"])]


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> LLM:
    return LLM(str(tiny_llama), dtype="float32", max_num_seqs=8, max_model_len=64)


def _run(tmp_path: Path, model: Path, data: Path, **settings) -> tuple[list[dict], object]:
    config = JobConfig.from_settings(model=str(model), input=[str(data)], output=str(tmp_path / "out"),
                                     **{**FAST, **settings})
    outcome = run_job(config)
    export_job(tmp_path / "out", tmp_path / "out.parquet")
    return read_results(tmp_path / "out.parquet"), outcome


def test_score_equals_loglikelihood(tmp_path: Path, tiny_llama: Path, llm: LLM) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", [{"context": c, "continuation": x} for c, x in PAIRS])
    rows, outcome = _run(tmp_path, tiny_llama, data, task="score")
    expected = llm.loglikelihood(PAIRS)
    assert outcome.complete and outcome.rows_failed == 0
    assert [row["logprob"] for row in rows] == pytest.approx([e.logprob for e in expected], abs=1e-4)
    assert [row["is_greedy"] for row in rows] == [e.is_greedy for e in expected]


def test_choice_argmax_equals_loglikelihood(tmp_path: Path, tiny_llama: Path, llm: LLM) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p, "choices": c} for p, c in CHOICES])
    rows, _ = _run(tmp_path, tiny_llama, data, task="choice")
    for row, (prompt, choices) in zip(rows, CHOICES):
        scores = llm.loglikelihood([(prompt, choice) for choice in choices])
        raw = [s.logprob for s in scores]
        norm = [s.logprob / len(s.token_logprobs) for s in scores]
        assert row["choice_logprobs"] == pytest.approx(raw, abs=1e-4)
        assert row["choice_logprobs_norm"] == pytest.approx(norm, abs=1e-4)
        assert (row["choice"], row["choice_norm"]) == (raw.index(max(raw)), norm.index(max(norm)))


def test_bad_rows_become_error_rows(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", [
        {"prompt": "a", "choices": [" b"]}, {"prompt": "a"}, {"prompt": "a", "choices": []},
        {"prompt": "a", "choices": [" b", 3]}, {"prompt": 5, "choices": [" b"]},
        {"prompt": "word " * 80, "choices": [" b"]},
    ])
    rows, outcome = _run(tmp_path, tiny_llama, data, task="choice")
    assert (outcome.rows_total, outcome.rows_failed, outcome.complete) == (6, 5, True)
    errors = [row["error"] for row in rows]
    assert errors[0] is None and rows[0]["choice"] == 0
    assert errors[1] == "in.jsonl line 2: no 'choices' field"
    assert "non-empty list" in errors[2] and "only strings" in errors[3] and "must be a string" in errors[4]
    assert "exceeds max_model_len 64" in errors[5] and rows[5]["choice"] is None


def test_left_truncation_keeps_the_continuation(tmp_path: Path, tiny_llama: Path, llm: LLM) -> None:
    pair = ("word " * 80, "end")
    data = write_jsonl(tmp_path / "in.jsonl", [{"context": pair[0], "continuation": pair[1]}])
    rows, _ = _run(tmp_path, tiny_llama, data, task="score", truncate="left")
    assert rows[0]["error"] is None
    assert rows[0]["logprob"] == pytest.approx(llm.loglikelihood([pair])[0].logprob, abs=1e-4)


def test_rerun_resumes_with_each_row_once(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt": p, "choices": c} for p, c in CHOICES * 3])
    first, _ = _run(tmp_path, tiny_llama, data, task="choice")
    again, outcome = _run(tmp_path, tiny_llama, data, task="choice")
    assert outcome.complete and outcome.rows_done == 9
    assert [row["row_index"] for row in again] == list(range(9))
    assert [row["choice"] for row in again] == [row["choice"] for row in first]


def test_eval_choice_example_is_mostly_right(tmp_path: Path) -> None:
    settings = read_job_file(ROOT / "jobs" / "eval-choice.toml", run_settings())
    settings.update(model=str(ROOT / settings["model"]), input=[str(ROOT / p) for p in _paths(settings["input"])],
                    output=str(tmp_path / "out"))
    assert run_job(JobConfig.from_settings(**settings)).complete
    export_job(tmp_path / "out", tmp_path / "out.parquet")
    rows = read_results(tmp_path / "out.parquet")
    assert sum(row["choice"] == row["answer"] for row in rows) / len(rows) >= 0.9


def _paths(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value
