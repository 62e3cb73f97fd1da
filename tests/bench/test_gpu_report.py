"""The device check's report and its script's command line, without a device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def bench(tok_s: float, vs_floor: float | None = None, system: str = "bulkinfer") -> dict:
    report = {"systems": {system: {"useful_output_tok_s": tok_s, "total_tok_s": 2 * tok_s}}}
    if vs_floor is not None:
        report["decode_step"] = {"batch": 256, "step_ms": 10.0, "floor_ms": 10.0 / vs_floor, "vs_floor": vs_floor}
    return report


def test_report_judges_the_targets(tmp_path):
    (tmp_path / "gpu_check_steps.jsonl").write_text(
        '{"step": "kernel tests", "rc": "0", "seconds": 80, "log": "t.log", "note": ""}\n')
    (tmp_path / "t.log").write_text("== 120 passed in 70.2s ==\n")
    (tmp_path / "gpu_stage1.json").write_text(json.dumps(
        {"model": "random:0.5b", "dtype": "bfloat16", "prompts": 64,
         "checks": {"parity": {"passed": True, "token_match": 0.99}, "graphs": {"passed": False}}}))
    (tmp_path / "gpu_bench_0.5b.json").write_text(json.dumps(bench(30000.0, 1.3)))
    (tmp_path / "gpu_bench_1.5b.json").write_text(json.dumps(bench(20000.0, 1.7)))
    (tmp_path / "gpu_bench_hf_1.5b.json").write_text(json.dumps(bench(1500.0, system="continuous")))
    done = subprocess.run([sys.executable, str(SCRIPTS / "gpu_report.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    targets = report["targets"]
    assert targets["decode_vs_floor_0.5b"]["met"] is True and targets["decode_vs_floor_1.5b"]["met"] is False
    assert targets["decode_vs_floor_8b"]["met"] is None  # missing, never invented
    assert targets["speedup_vs_transformers_1.5b"] == {"value": 13.33, "met": True}
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert "| graphs | FAILED |" in markdown and "| 8b | missing |" in markdown and "120 passed" in markdown


def test_check_script_refuses_a_bad_stage_and_needs_a_gpu(tmp_path):
    bad = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), "--stage", "3"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2 and "usage" in bad.stderr
    import torch

    if not torch.cuda.is_available():
        done = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh"), "--stage", "1", str(tmp_path)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1 and "no CUDA device" in done.stderr
