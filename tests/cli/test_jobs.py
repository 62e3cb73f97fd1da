"""Every job file in jobs/ runs on the demo model from the repository root and does what its comments say."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import REPO, exported, invoke


@pytest.fixture(autouse=True)
def at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # job files name their paths relative to where bulkinfer starts


def _addition_subset(path: Path, rows: int) -> Path:
    lines = (REPO / "examples" / "data" / "addition.jsonl").read_text().splitlines()[:rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_demo_job_is_accurate_and_writes_stats(capsys, tmp_path: Path) -> None:
    subset = _addition_subset(tmp_path / "addition.jsonl", 120)  # the whole 2,000 rows take ~30 s on 2 cores
    code, _, err = invoke(capsys, "run", "jobs/demo.toml", "--input", subset, "--output", tmp_path / "out",
                          "--hourly-cost", "3")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    correct = sum(row["generated_text"] == row["answer"] for row in rows)
    assert len(rows) == 120 and correct / len(rows) >= 0.95
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["rows_done"] == 120 and stats["rows_failed"] == 0 and stats["output_tokens"] > 120
    assert stats["settings"]["max_tokens"] == 8 and stats["settings"]["temperature"] == 0
    assert stats["cost_per_million_output_tokens"] > 0
    assert stats["model_impl"] == "native"
    assert stats["dtype"] in ("bfloat16", "float32") and stats["dtype_reason"].startswith("auto: ")


def test_demo_job_through_transformers_code_is_as_accurate(capsys, tmp_path: Path) -> None:
    subset = _addition_subset(tmp_path / "addition.jsonl", 40)
    code, _, err = invoke(capsys, "run", "jobs/demo.toml", "--input", subset, "--output", tmp_path / "out",
                          "--model-impl", "transformers")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    assert sum(row["generated_text"] == row["answer"] for row in rows) / len(rows) >= 0.95
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["model_impl"] == "transformers"


def test_demo_job_on_an_fp8_kv_cache_is_as_accurate_and_reports_its_kv_bytes(capsys, tmp_path: Path) -> None:
    subset = _addition_subset(tmp_path / "addition.jsonl", 40)
    code, out, err = invoke(capsys, "run", "jobs/demo.toml", "--input", subset, "--output", tmp_path / "out",
                            "--kv-cache-dtype", "fp8_e4m3")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    assert sum(row["generated_text"] == row["answer"] for row in rows) / len(rows) >= 0.95
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    model = json.loads((REPO / "examples" / "demo-model" / "config.json").read_text())
    head_dim = model.get("head_dim") or model["hidden_size"] // model["num_attention_heads"]
    elements = 2 * model["num_hidden_layers"] * model["num_key_value_heads"] * head_dim
    assert stats["kv_cache_dtype"] == "float8_e4m3fn" and stats["kv_bytes_per_token"] == elements  # a byte each


def test_eval_suite_job_answers_every_task(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "jobs/eval-suite.toml", "--output", tmp_path / "out")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    right = Counter(row["task"] for row in rows if row["generated_text"] == row["answer"])
    assert set(right) == {"add-1digit", "add-2digit", "add-3digit"}
    assert sum(right.values()) / len(rows) >= 0.9
    # The prompts of a task share their few-shot examples: whole KV blocks the prefix cache serves.
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["prefix_cache_hit_rate"] > 0.5


@pytest.mark.parametrize("job", ["eval-score", "eval-choice"])
def test_scoring_jobs_score_right_answers_above_wrong_ones(capsys, tmp_path: Path, job: str) -> None:
    code, _, err = invoke(capsys, "run", f"jobs/{job}.toml", "--output", tmp_path / "out")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    if job == "eval-score":
        assert all(row["is_greedy"] == row["correct"] for row in rows)
    else:
        assert sum(row["choice"] == row["answer"] for row in rows) / len(rows) >= 0.9
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["prefix_cache_hit_rate"] > 0.4


def test_synthetic_job_samples_n_per_prompt_reproducibly(capsys, tmp_path: Path) -> None:
    for run in ("a", "b"):
        code, _, err = invoke(capsys, "run", "jobs/synthetic.toml", "--output", tmp_path / run)
        assert code == 0, err
    first, second = exported(capsys, tmp_path / "a"), exported(capsys, tmp_path / "b")
    assert all(len(row["generated_text"]) == 4 for row in first)
    assert first == second  # seeded: the same samples on every run
    assert any(len(set(row["generated_text"])) > 1 for row in first)  # temperature 0.8 varies them


def test_overnight_job_reads_parquet_with_per_row_budgets(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "jobs/overnight.toml", "--output", tmp_path / "out")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    assert len(rows) == 200 and all(row["error"] is None for row in rows)
    assert max(row["completion_tokens"] for row in rows if row["budget"] == 4) <= 4
    right = sum(row["generated_text"] == str(sum(map(int, row["text"][:-1].split("+")))) for row in rows)
    assert right / len(rows) >= 0.95


def test_each_shard_of_a_split_job_writes_its_own_stats(capsys, tmp_path: Path) -> None:
    for shard in ("0", "1"):
        code, _, err = invoke(capsys, "run", "jobs/eval-suite.toml", "--output", tmp_path / "out",
                              "--num-shards", "2", "--shard", shard)
        assert code == 0, err
    stats = [json.loads((tmp_path / "out" / f"stats-{i}-of-2.json").read_text()) for i in (0, 1)]
    assert [s["rows_this_run"] for s in stats] == [30, 30]
    assert len(exported(capsys, tmp_path / "out")) == 60


def test_classify_job_answers_with_one_of_each_rows_labels(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "jobs/classify.toml", "--output", tmp_path / "out")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    assert all(row["generated_text"] in row["choices"] for row in rows)
    correct = sum(row["choices"].index(row["generated_text"]) == row["answer"] for row in rows)
    assert correct / len(rows) >= 0.9


def test_extract_job_writes_valid_json(capsys, tmp_path: Path) -> None:
    subset = _addition_subset(tmp_path / "addition.jsonl", 60)
    code, _, err = invoke(capsys, "run", "jobs/extract.toml", "--input", subset, "--output", tmp_path / "out")
    assert code == 0, err
    rows = exported(capsys, tmp_path / "out")
    assert all(row["finish_reason"] == "stop" and isinstance(json.loads(row["generated_json"]), int) for row in rows)
    assert sum(json.loads(row["generated_json"]) == int(row["answer"]) for row in rows) / len(rows) >= 0.95
