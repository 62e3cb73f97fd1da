"""Bench figures that hold from run to run: every system timed several times, in turn, reported by the median."""

from __future__ import annotations

import statistics
import subprocess
import sys

import pytest

from bulkinfer.bench.run import format_report, run_benchmark

# Short prompts after a shared prefix and 1 to 8 output tokens: the cheapest workload to time three times.
TINY = {"model": "random:tiny", "workload": "prefix", "num_requests": 2}


@pytest.mark.slow
def test_each_system_runs_in_turn_and_is_reported_by_its_median() -> None:
    report = run_benchmark(**TINY, compare=("bulkinfer", "static"), repeats=3)
    assert [run["system"] for run in report["runs"]] == ["bulkinfer", "static"] * 3
    for system in ("bulkinfer", "static"):
        times = [run["seconds"] for run in report["runs"] if run["system"] == system]
        row = report["systems"][system]
        assert row["repeats"] == 3
        assert row["seconds"] == pytest.approx(statistics.median(times), abs=2e-3)
        assert (row["seconds_min"], row["seconds_max"]) == pytest.approx((min(times), max(times)), abs=2e-3)
    static = report["systems"]["static"]
    assert static["bulkinfer_speedup"] == pytest.approx(
        report["systems"]["bulkinfer"]["useful_output_tok_s"] / static["useful_output_tok_s"], rel=0.02)
    assert "median of 3" in format_report(report)


@pytest.mark.slow
def test_transformers_log_lines_stay_out_of_the_output() -> None:
    # Without psutil (hidden here), transformers' continuous batching logs an ERROR line on the CPU.
    hide_psutil = "import sys; sys.modules['psutil'] = None; from bulkinfer.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", hide_psutil, "bench", "--model", TINY["model"], "--workload",
                           TINY["workload"], "--num-requests", "2", "--compare", "continuous"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert "continuous" in done.stdout and "failed" not in done.stdout
    assert done.stderr == ""
