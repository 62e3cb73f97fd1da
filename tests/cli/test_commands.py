"""inspect, bench and lm-eval, and what every command's --help shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import DEMO_MODEL, REPO, invoke, one_line_error

import bulkinfer.cli.lm_eval as lm_eval_cli
from bulkinfer.cli.histogram import LengthBin, length_bins

DATA = REPO / "examples" / "data"


def test_length_bins_are_the_runners_and_keep_empty_gaps() -> None:
    assert length_bins([1, 5, 6, 20]) == [LengthBin(1, 1, 1), LengthBin(2, 3, 0), LengthBin(4, 7, 2),
                                          LengthBin(8, 15, 0), LengthBin(16, 31, 1)]


def test_inspect_counts_tokens_bins_and_estimates_cost(capsys) -> None:
    code, out, err = invoke(capsys, "inspect", DATA / "overnight.parquet", "--prompt-column", "text",
                            "--model", DEMO_MODEL, "--max-tokens", "8", "--hourly-cost", "3.6",
                            "--output-tok-s", "1000")
    assert code == 0, err
    for part in ("200 (0 would be error rows)", "budget, doc_id, text", "prompt length (tokens)", "8-15",
                 "at most 1,600 tokens", "1.0000 per million output tokens"):
        assert part in out, part


def test_inspect_shows_the_kv_bytes_per_token_of_the_cache_dtype(capsys) -> None:
    config = json.loads((Path(DEMO_MODEL) / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    elements = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
    for flags, expected in ((["--dtype", "float32"], f"float32, {4 * elements:,} bytes per token"),
                            (["--dtype", "bfloat16"], f"bfloat16, {2 * elements:,} bytes per token"),
                            (["--kv-cache-dtype", "fp8_e4m3"], f"float8_e4m3fn, {elements:,} bytes per token")):
        code, out, err = invoke(capsys, "inspect", DATA / "addition.jsonl", "--model", DEMO_MODEL, *flags)
        assert code == 0, err
        assert "KV cache" in out and expected in out, out


def test_inspect_without_a_model_counts_characters_of_chat_messages(capsys) -> None:
    code, out, err = invoke(capsys, "inspect", DATA / "synthetic-seeds.jsonl", "--messages-column", "messages")
    assert code == 0, err
    assert "16 (0 would be error rows)" in out and "prompt length (characters)" in out


@pytest.mark.parametrize("arguments, message", [
    (["nope.jsonl"], "nope.jsonl: no such file or directory"),
    ([str(DATA / "addition.jsonl"), "--prompt-column", "text"], "no column 'text'"),
    ([str(DATA / "addition.jsonl"), "--model", "/no/model"], "/no/model: no such model directory"),
    ([str(DATA / "addition.jsonl"), "--n", "0"], "n must be >= 1, got 0"),
])
def test_inspect_mistakes_are_one_line(capsys, arguments: list[str], message: str) -> None:
    assert message in one_line_error(*invoke(capsys, "inspect", *arguments)[::2])


@pytest.mark.slow
def test_bench_runs_bulkinfer_on_a_tiny_random_model(capsys, tmp_path: Path) -> None:
    code, out, err = invoke(capsys, "bench", "--model", "random:tiny", "--num-requests", "3",
                            "--compare", "bulkinfer", "--repeats", "1", "--output", tmp_path / "bench.json")
    assert code == 0, err
    assert "bulkinfer" in out and "useful tok/s" in out and "the bandwidth floor of" in out
    report = json.loads((tmp_path / "bench.json").read_text())
    assert list(report["systems"]) == ["bulkinfer"]
    assert report["decode_step"]["vs_floor"] > 0 and report["decode_step"]["copy_gb_s"] > 0


def test_bench_reports_a_structured_run_beside_the_free_one(capsys, tmp_path: Path) -> None:
    code, out, err = invoke(capsys, "bench", "--model", "random:tiny", "--num-requests", "4", "--compare",
                            "bulkinfer", "--structured", "json", "--repeats", "1", "--output", tmp_path / "bench.json")
    assert code == 0, err
    assert "of unconstrained in generated tok/s" in out
    row = json.loads((tmp_path / "bench.json").read_text())["systems"]["bulkinfer-json"]
    grammar = row["grammar"]
    assert row["vs_unconstrained"] > 0 and grammar["masked_steps"] > 0 and grammar["jump_forward_tokens"] > 0
    assert grammar["probe_256"]["rows"] == 256 and grammar["probe_256"]["step_ms"] > 0


@pytest.mark.slow
def test_bench_runs_transformers_continuous_batching_to_the_end(capsys, tmp_path: Path) -> None:
    code, out, err = invoke(capsys, "bench", "--model", "random:tiny", "--num-requests", "6",
                            "--compare", "continuous", "--repeats", "1", "--output", tmp_path / "bench.json")
    assert code == 0, err
    report = json.loads((tmp_path / "bench.json").read_text())
    continuous = report["systems"]["continuous"]
    assert "error" not in continuous, continuous
    assert continuous["generated_tokens"] == report["useful_output_tokens"]  # each its own max_tokens, no EOS stop


@pytest.mark.parametrize("arguments, message", [
    (["--compare", "bulkinfer,vllm"], "--compare: unknown system vllm"),
    (["--workload", "chat"], "--workload must be one of mixed, prefix, synthetic"),
    (["--model", "random:huge", "--compare", "bulkinfer"], "unknown random shape 'huge'"),
    (["--repeats", "0"], "--repeats must be at least 1"),
])
def test_bench_mistakes_are_one_line(capsys, arguments: list[str], message: str) -> None:
    assert message in one_line_error(*invoke(capsys, "bench", *arguments)[::2])


def test_lm_eval_passes_every_argument_through(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(lm_eval_cli, "lm_eval_main", lambda argv: seen.append(argv) or 3)
    argv = ["--model", "bulkinfer", "--model_args", "pretrained=x,dtype=float32", "--tasks", "t", "--help", "-x"]
    code, _, _ = invoke(capsys, "lm-eval", *argv)
    assert seen == [argv] and code == 3


@pytest.mark.parametrize("command, defaults", [
    ("run", ["--max-tokens", "(default: 256)", "--temperature", "(default: 1.0)", "--hourly-cost", "JOB.toml",
             "(required: here or in the job file)", "--format", "(default: rows)"]),
    ("inspect", ["--max-tokens", "256", "--prompt-column", "prompt", "--output-tok-s"]),
    ("bench", ["--model", "random:50m", "--workload", "mixed", "--compare", "bulkinfer,static,continuous"]),
    ("export", ["--partial"]),
    ("status", ["--json"]),
])
def test_help_shows_every_option_with_its_default(capsys, monkeypatch: pytest.MonkeyPatch, command: str,
                                                  defaults: list[str]) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per option, whatever the terminal running the tests
    code, out, _ = invoke(capsys, command, "--help")
    flat = " ".join(out.split())
    assert code == 0 and all(part in flat for part in defaults) and "MISSING" not in flat, flat
