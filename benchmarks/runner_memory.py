"""Peak memory of a bulkinfer job does not grow with the dataset.

Runs the same job (real engine, a tiny checkpoint, one generated token per row so the runner's own
work dominates) over N and factor x N rows, each in a fresh process, and reports each process's peak
RSS; then the same for `export`. Rows carry a few hundred bytes of payload, so a runner that held
the dataset (or its results) in memory would show it plainly.

    python benchmarks/runner_memory.py [--rows 20000] [--factor 10] [--model DIR]

Without --model it builds the test suite's tiny random Llama checkpoint (no network needed).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB_SETTINGS = dict(max_tokens=1, temperature=0.0, max_num_seqs=256, window_rows=2000, shard_rows=2000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--factor", type=int, default=10)
    parser.add_argument("--model", type=Path, help="checkpoint directory (default: build a tiny one)")
    parser.add_argument("--child", nargs=2, metavar=("WHAT", "ARGS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return
    with tempfile.TemporaryDirectory(prefix="bulkinfer-memory-") as scratch:
        _compare(Path(scratch), args.model or _tiny_model(Path(scratch)), args.rows, args.factor)


def _compare(scratch: Path, model: Path, rows: int, factor: int) -> None:
    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}, settings: {JOB_SETTINGS}")
    results = {}
    for count in (rows, rows * factor):
        data = _dataset(scratch / f"in-{count}.jsonl", count)
        out = scratch / f"out-{count}"
        run = _in_child("run", {"model": str(model), "input": [str(data)], "output": str(out), **JOB_SETTINGS})
        export = _in_child("export", {"output": str(out), "file": str(scratch / f"results-{count}.parquet")})
        results[count] = (run, export)
        print(f"{count:>9,} rows: run peak RSS {run['peak_rss_mb']:8.1f} MB ({run['seconds']:.0f} s, "
              f"{count / run['seconds']:.0f} rows/s); export peak RSS {export['peak_rss_mb']:8.1f} MB")
    (small_run, small_export), (big_run, big_export) = results.values()
    print(f"{factor}x rows: run peak RSS {_change(small_run, big_run)}, export peak RSS {_change(small_export, big_export)}")


def _change(small: dict, big: dict) -> str:
    return f"{100.0 * (big['peak_rss_mb'] / small['peak_rss_mb'] - 1):+.1f}%"


def _dataset(path: Path, count: int) -> Path:
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge".split()
    with open(path, "w") as handle:
        for i in range(count):
            prompt = " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 17))
            handle.write(json.dumps({"prompt": prompt, "id": f"row-{i}", "payload": "x" * (200 + i % 300)}) + "\n")
    return path


def _in_child(what: str, settings: dict) -> dict:
    command = [sys.executable, __file__, "--child", what, json.dumps(settings)]
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        sys.exit(f"{what} failed:\n{finished.stderr}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def _child(what: str, settings_json: str) -> None:
    from bulkinfer.runner.config import JobConfig
    from bulkinfer.runner.export import export_job
    from bulkinfer.runner.job import run_job

    settings = json.loads(settings_json)
    started = time.monotonic()
    if what == "run":
        outcome = run_job(JobConfig.from_settings(**settings))
        assert outcome.complete, outcome
    else:
        export_job(Path(settings["output"]), Path(settings["file"]))
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    print(json.dumps({"peak_rss_mb": peak_kb / 1024, "seconds": time.monotonic() - started}))


def _tiny_model(scratch: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from checkpoints import make_checkpoint

    return make_checkpoint(scratch / "tiny-llama", "llama")


if __name__ == "__main__":
    main()
