"""Merge one gpu_check.sh run into gpu_check.json and gpu_check.md in its output folder.

Reads what the earlier steps left there: ``gpu_check_steps.jsonl`` (one line per step: its exit
status, seconds and log file), the step logs, and ``gpu_kernels.json`` from
gpu_bench_kernels.py. Missing pieces are reported as missing, never invented.

Usage: python scripts/gpu_report.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

DEFAULT_OUT = Path("benchmarks/results")
STEPS = "gpu_check_steps.jsonl"
KERNELS = "gpu_kernels.json"
LOG_TAIL_LINES = 25


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the run's folder (default: {DEFAULT_OUT})")
    out = parser.parse_args(argv).out
    report = collect(out)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu_check.md").write_text(markdown(report))
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    return 0


def collect(out: Path) -> dict:
    steps = [json.loads(line) for line in _read(out / STEPS).splitlines() if line.strip()]
    for step in steps:
        log = _read(out / step["log"]) if step.get("log") else ""
        step["summary"] = pytest_summary(log) or ""
        step["log_tail"] = log.splitlines()[-LOG_TAIL_LINES:]
    kernels_text = _read(out / KERNELS)
    return {"steps": steps, "kernels": json.loads(kernels_text) if kernels_text else None}


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def pytest_summary(log: str) -> str | None:
    """pytest's last line, e.g. '180 passed, 2 skipped in 95.1s', if the log has one."""
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed|error).*? in [\d.]+s.*?)\s*=*$", log, re.MULTILINE)
    return found[-1] if found else None


def markdown(report: dict) -> str:
    lines = ["# GPU check", ""]
    lines += steps_table(report["steps"])
    lines += kernels_section(report["kernels"])
    lines += logs_section(report["steps"])
    return "\n".join(lines) + "\n"


def steps_table(steps: list[dict]) -> list[str]:
    lines = ["## Steps", "", "| step | result | seconds | summary / note |", "| --- | --- | --- | --- |"]
    for step in steps:
        rc = step["rc"]
        result = "passed" if rc == "0" else "skipped" if rc == "skipped" else "timed out" if rc == "124" else f"failed ({rc})"
        lines.append(f"| {step['step']} | {result} | {step['seconds']} | {step['summary'] or step.get('note', '')} |")
    return lines + [""]


def kernels_section(kernels: dict | None) -> list[str]:
    if kernels is None:
        return ["## Kernels", "", f"No {KERNELS}: the kernel timing step did not finish.", ""]
    peaks = kernels["peaks"]
    lines = ["## Kernels", "",
             f"{kernels['device']}, torch {kernels['torch']}, triton {kernels['triton']}, {kernels['dtype']}, "
             f"{kernels['date']}. Measured peaks: copy {peaks['copy_gb_s']:.0f} GB/s (read + write), "
             f"matmul {peaks['matmul_tflop_s']:.0f} TFLOP/s. Rates count the work the operation must do, "
             "the same for every implementation of a case.", "",
             "| kernel | case | implementation | ms | GB/s | % copy | TFLOP/s | % matmul | max err vs ref |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in kernels["rows"]:
        if "error" in row:
            first = row["error"].strip().splitlines()[-1].replace("|", "\\|")
            lines.append(f"| {row['kernel']} | {row.get('shape', '')} | {row.get('impl', '')} | error: {first} "
                         "| | | | | |")
            continue
        lines.append(f"| {row['kernel']} | {row['shape']} | {row['impl']} | {row['ms']} | {row['gb_s']} | "
                     f"{row['pct_copy_bw']} | {row['tflop_s']} | {row['pct_matmul']} | "
                     f"{row.get('max_abs_err_vs_ref', '')} |")
    return lines + [""]


def logs_section(steps: list[dict]) -> list[str]:
    lines = ["## Log tails", ""]
    for step in steps:
        if step["log_tail"]:
            lines += [f"### {step['step']}", "", "```", *step["log_tail"], "```", ""]
    return lines


if __name__ == "__main__":
    sys.exit(main())
