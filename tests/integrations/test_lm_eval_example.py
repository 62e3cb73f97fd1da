"""docs/lm-eval.md's offline example: the repository's task YAML over its own data and demo model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

REPO = Path(__file__).resolve().parents[2]


def _documented_command() -> list[str]:
    """The example's command as docs/lm-eval.md prints it, so that the test runs what a reader runs."""
    text = (REPO / "docs" / "lm-eval.md").read_text()
    [command] = re.findall(r"^(bulkinfer lm-eval .*--include_path examples/lm-eval.*)$", text, re.MULTILINE)
    return command.split()[1:]


@pytest.mark.slow  # lm_eval's task indexing and whole command line: about 25 s on 2 cores
def test_the_offline_example_runs_with_no_network_and_the_demo_model_adds(tmp_path: Path) -> None:
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    argv = [sys.executable, "-m", "bulkinfer", *_documented_command(), "--output_path", str(tmp_path / "out")]
    done = subprocess.run(argv, cwd=REPO, env=offline, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    [results_file] = (tmp_path / "out").rglob("results_*.json")
    arith = json.loads(results_file.read_text())["results"]["arith"]
    # The demo model adds 59 of these 60 problems greedily (its README: 0.998 with a few-shot prefix).
    assert arith["exact_match,none"] >= 0.95
