"""Merge one gpu_check.sh run into gpu_check.json and gpu_check.md in its output folder.

Reads what the earlier steps left there: ``gpu_check_steps.jsonl`` (one line per step: its exit
status, seconds and log file), the step logs, ``gpu_stage1.json`` (scripts/gpu_stage1.py), the
bench reports ``gpu_bench_*.json`` and ``gpu_kernels.json`` from gpu_bench_kernels.py, and judges
the targets: a decode step within 1.5x of the bandwidth floor at batch 256, and bulkinfer at least
10x transformers' continuous batching on the 1.5B shape. Missing pieces are reported as missing,
never invented.

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
STAGE1 = "gpu_stage1.json"
BENCH_MODELS = ("0.5b", "1.5b", "8b")
HF_BENCH = "gpu_bench_hf_1.5b.json"
DECODE_TARGET = 1.5  # the decode step within this many times the bandwidth floor, at batch 256
SPEEDUP_TARGET = 10.0  # bulkinfer vs transformers' continuous batching on the 1.5B shape
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
    benches = {model: _json(out / f"gpu_bench_{model}.json") for model in BENCH_MODELS}
    hf = _json(out / HF_BENCH)
    return {"steps": steps, "stage1": _json(out / STAGE1), "benches": benches, "transformers_1.5b": hf,
            "targets": targets(benches, hf), "kernels": _json(out / KERNELS)}


def _json(path: Path) -> dict | None:
    text = _read(path)
    return json.loads(text) if text else None


def targets(benches: dict, hf: dict | None) -> dict:
    """Each target: met (True/False), or None when its measurement is missing."""
    found = {}
    for model, bench in benches.items():
        decode = (bench or {}).get("decode_step") or {}
        found[f"decode_vs_floor_{model}"] = {
            "value": decode.get("vs_floor"), "batch": decode.get("batch"),
            "met": None if "vs_floor" not in decode else decode["vs_floor"] <= DECODE_TARGET}
    ours = ((benches.get("1.5b") or {}).get("systems") or {}).get("bulkinfer", {}).get("useful_output_tok_s")
    theirs = ((hf or {}).get("systems") or {}).get("continuous", {}).get("useful_output_tok_s")
    speedup = round(ours / theirs, 2) if ours and theirs else None
    found["speedup_vs_transformers_1.5b"] = {"value": speedup,
                                             "met": None if speedup is None else speedup >= SPEEDUP_TARGET}
    return found


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def pytest_summary(log: str) -> str | None:
    """pytest's last line, e.g. '180 passed, 2 skipped in 95.1s', if the log has one."""
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed|error).*? in [\d.]+s.*?)\s*=*$", log, re.MULTILINE)
    return found[-1] if found else None


def markdown(report: dict) -> str:
    lines = ["# GPU check", ""]
    lines += steps_table(report["steps"])
    lines += stage1_section(report["stage1"])
    lines += speed_section(report)
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


def stage1_section(stage1: dict | None) -> list[str]:
    if stage1 is None:
        return ["## Stage 1: correctness", "", f"No {STAGE1}: scripts/gpu_stage1.py did not finish.", ""]
    setup = f"{stage1['model']}, {stage1['prompts']} prompts, {stage1.get('dtype', 'bfloat16')}."
    lines = ["## Stage 1: correctness", "", setup, "",
             "| check | result | details |", "| --- | --- | --- |"]
    for name, check in stage1["checks"].items():
        details = ", ".join(f"{k} {v}" for k, v in check.items() if k != "passed")
        lines.append(f"| {name} | {'passed' if check['passed'] else 'FAILED'} | {details.replace('|', '/')} |")
    return lines + [""]


def speed_section(report: dict) -> list[str]:
    header = "| model | output tok/s | total tok/s | decode step ms (batch) | floor ms | x floor |"
    lines = ["## Stage 2: speed", "", header, "| --- | --- | --- | --- | --- | --- |"]
    for model, bench in report["benches"].items():
        if bench is None:
            lines.append(f"| {model} | missing | | | | |")
            continue
        ours = bench["systems"].get("bulkinfer", {})
        decode = bench.get("decode_step") or {}
        lines.append(f"| {model} | {ours.get('useful_output_tok_s', '')} | {ours.get('total_tok_s', '')} | "
                     f"{decode.get('step_ms', '')} ({decode.get('batch', '')}) | {decode.get('floor_ms', '')} | "
                     f"{decode.get('vs_floor', decode.get('error', ''))} |")
    lines += ["", "| target | value | met |", "| --- | --- | --- |"]
    for name, target in report["targets"].items():
        met = "missing" if target["met"] is None else "yes" if target["met"] else "NO"
        lines.append(f"| {name} | {target['value']} | {met} |")
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
