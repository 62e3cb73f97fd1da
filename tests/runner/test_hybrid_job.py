"""A job on a hybrid model (Qwen3.5: gated delta-net layers, Granite 4.0-H: Mamba2 layers, LFM2: short convolutions,
on the recurrent state pool) through `bulkinfer run`: its summary says why prefix caching is off, and a SIGKILLed
run resumes to the uninterrupted run's rows."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from runner_files import prompts, read_results, write_jsonl
from subprocess_job import SETTINGS, killed_and_resumed

from bulkinfer.engine.state_pool import NO_PREFIX_CACHING
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job

ROWS = 48


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("hybrid") / "in.jsonl", prompts(ROWS))


def _exported(out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}.parquet"
    export_job(out, destination)
    return read_results(destination)


@pytest.mark.parametrize("arch", ["qwen3_5", "granite_h", "lfm2"])
def test_run_reports_the_state_and_why_prefix_caching_is_off(tmp_path: Path, data: Path, checkpoint_factory,
                                                              arch: str) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bulkinfer", "run", "--model", str(checkpoint_factory(arch)), "--input", str(data),
               "--output", str(out), "--max-tokens", "4", "--temperature", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["rows_done"] == ROWS and stats["prefix_caching_off"] == NO_PREFIX_CACHING
    assert stats["state_bytes_per_seq"] > 0 and "recurrent state" in result.stderr


@pytest.mark.slow  # child processes killed and resumed
@pytest.mark.parametrize("arch", ["qwen3_5", "granite_h"])
def test_a_hybrid_job_resumes_after_sigkill(tmp_path: Path, data: Path, checkpoint_factory, arch: str) -> None:
    hybrid = checkpoint_factory(arch)
    run_job(JobConfig.from_settings(model=str(hybrid), input=[str(data)], output=str(tmp_path / "base"), **SETTINGS))
    out = tmp_path / "out"
    killed_and_resumed(hybrid, data, out, (), seed=3)
    rows = _exported(out)
    assert [row["row_index"] for row in rows] == list(range(ROWS))
    assert rows == _exported(tmp_path / "base")
