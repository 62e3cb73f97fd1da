"""Every sampling setting, given its boundary and hostile values per row, ends as that row's error row
(naming the setting) or runs; no value crashes the job, and a rerun finds it complete. The fields come
from SamplingParams' declarations, so a new one is tried without touching this file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import SEED_MAX, SEED_MIN, settings_of

MAX_N = 4
# Sampled (not greedy), so that every sampling filter meets its hostile values; seeded, so that it is repeatable.
SETTINGS = dict(max_tokens=2, temperature=1.0, seed=0, max_num_seqs=8, max_model_len=64, max_n=MAX_N)
PER_ROW = [s for s in settings_of(SamplingParams) if s.per_row]
HOSTILE = [-1, 0, 1, 2, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**80, -2**63, -2**63 - 1, -2**80, 1e23, 0.5,
           -0.5, 1e-300, 1e300, math.nan, math.inf, -math.inf, "", " ", "x", "nan", [], [1], ["a"], [""], [2**80],
           {}, {"type": "object"}, True, False]


def _values(name: str, vocab: int) -> list[Any]:
    """The hostile values, and the boundaries this model and job give the setting."""
    bounds = {"n": [MAX_N, MAX_N + 1], "logprobs": [vocab, vocab + 1], "prompt_logprobs": [vocab, vocab + 1],
              "max_tokens": [64, 63], "seed": [SEED_MIN, SEED_MAX, SEED_MAX + 1, SEED_MIN - 1],
              "top_p": [1e-9, 1.0000001], "min_p": [1.0, 1.0000001], "stop_token_ids": [[-1], [vocab]],
              "presence_penalty": [2.0, 2.0000001], "frequency_penalty": [-2.0, -2.0000001],
              "min_tokens": [2, 3], "best_of": [MAX_N], "truncate_prompt_tokens": [-1, -2],
              "logit_bias": [{"0": 100}, {str(vocab - 1): -1e300}, {str(vocab): 1}, {"-1": 1}, {"1": "x"},
                             {"1": 1e309}, {"2**80": 1}],
              "bad_words": [["1+1"], ["\u0000"], ["a" * 1000]]}
    return HOSTILE + bounds.get(name, [])


def _must_fail(name: str, value: Any, vocab: int) -> bool:
    """The cases whose acceptance would be a bug: values nothing can run with, or out of the model's range."""
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if name == "seed" and isinstance(value, int) and not isinstance(value, bool):
        return not SEED_MIN <= value <= SEED_MAX
    if name == "logit_bias" and isinstance(value, dict) and value:
        return not all(key.isdigit() and int(key) < vocab for key in value)
    if name == "best_of" and isinstance(value, int) and not isinstance(value, bool):
        return value != 1  # n is 1 here
    limits = {"n": MAX_N, "logprobs": vocab, "prompt_logprobs": vocab, "min_tokens": SETTINGS["max_tokens"]}
    return name in limits and isinstance(value, int) and not isinstance(value, bool) and value > limits[name]


def _cases(vocab: int) -> list[tuple[str, Any]]:
    return [(s.name, value) for s in PER_ROW for value in _values(s.name, vocab)]


def _column(name: str) -> str:
    return f"p_{name}"


@pytest.fixture
def vocab(tiny_llama: Path) -> int:
    """The model's vocabulary size, the bound of logprobs and prompt_logprobs."""
    return json.loads((tiny_llama / "config.json").read_text())["vocab_size"]


def test_every_setting_hostile_per_row_is_an_error_row_or_runs(tmp_path: Path, tiny_llama: Path, vocab: int) -> None:
    cases = _cases(vocab)
    # The first line names every param column (null: the job's value); then one hostile value per line.
    lines = [{"prompt": "1+1=", **{_column(s.name): None for s in PER_ROW}}]
    lines += [{"prompt": "1+1=", _column(name): value} for name, value in cases]
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "out"),
                                     param_columns={s.name: _column(s.name) for s in PER_ROW}, **SETTINGS)
    assert run_job(config).complete
    assert run_job(config).complete  # the rerun crashes on nothing either
    export_job(tmp_path / "out", tmp_path / "out.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == len(lines) and rows[0]["error"] is None
    for (name, value), row in zip(cases, rows[1:]):
        error = row["error"]
        if error is None:
            assert not _must_fail(name, value, vocab), (name, value)
            assert row["generated_text"] is not None, (name, value)
        else:
            assert "\n" not in error and name in error, (name, value, error)
    failed = sum(row["error"] is not None for row in rows)
    print(f"{len(cases)} cases over {len(PER_ROW)} settings: {failed} error rows, {len(cases) - failed} ran")


def test_typed_parquet_columns_at_their_limits(tmp_path: Path, tiny_llama: Path, vocab: int) -> None:
    """Parquet's own types reach the settings as they are: int64's ends, float NaN and infinities."""
    columns = {"temperature": pa.array([math.nan, math.inf, 0.5, 1e-30], pa.float64()),
               "seed": pa.array([2**63 - 1, -2**63, 1, 0], pa.int64()),
               "logprobs": pa.array([vocab + 1, vocab, 2**63 - 1, 0], pa.int64()),
               "n": pa.array([2**63 - 1, MAX_N, -2**63, 1], pa.int64())}
    rows = len(columns["n"])
    table = {"prompt": ["1+1="] * rows, **{_column(name): values for name, values in columns.items()}}
    pq.write_table(pa.table(table), tmp_path / "in.parquet")
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(tmp_path / "in.parquet")],
                                     output=str(tmp_path / "out"),
                                     param_columns={name: _column(name) for name in columns}, **SETTINGS)
    assert run_job(config).complete and run_job(config).complete
    export_job(tmp_path / "out", tmp_path / "out.jsonl")
    errors = [json.loads(line)["error"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # Row 0: NaN; row 1: inf; row 2: logprobs 2**63 - 1, n -2**63; row 3 runs (a tiny temperature is greedy).
    assert ["temperature" in errors[0], "temperature" in errors[1], errors[3]] == [True, True, None], errors
    assert "n must be >= 1" in errors[2], errors


def test_a_job_seed_plus_the_row_index_past_64_bits_fails_that_row_only(tmp_path: Path, tiny_llama: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt": "1+1="}\n' * 3)
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "out"),
                                     **{**SETTINGS, "seed": SEED_MAX - 1})
    outcome = run_job(config)
    assert outcome.complete and outcome.rows_failed == 1
    export_job(tmp_path / "out", tmp_path / "out.jsonl")
    errors = [json.loads(line)["error"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert errors[:2] == [None, None] and "seed must be in [-2**63, 2**64 - 1]" in errors[2]


@pytest.mark.parametrize("name, value", [("temperature", math.nan), ("temperature", "hot"), ("stop", 5),
                                         ("logprobs", 10**6), ("n", 10**9)])
def test_the_python_api_refuses_a_bad_setting_for_its_request(tiny_llama: Path, name: str, value: Any) -> None:
    from bulkinfer import LLM

    with LLM(str(tiny_llama), max_model_len=64) as llm:
        try:
            params = SamplingParams(max_tokens=1, **{name: value})
        except ValueError as exc:  # refused on its own: before it reaches the engine
            assert name in str(exc)
            return
        bad, good = llm.generate(["1+1=", "1+1="], [params, SamplingParams(max_tokens=1)], use_tqdm=False)
    assert name in bad.error and good.error is None
