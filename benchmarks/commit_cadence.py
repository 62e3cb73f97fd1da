"""What committing often costs: rows per second of the demo job at several commit intervals.

    python benchmarks/commit_cadence.py --rows 2000 --seconds 2 10 60 --repeat 2 --output results.json

Each run is a fresh job on the demo model over `--rows` random addition problems like the demo's,
greedy, 8 tokens. A first run warms the model and the kernels' caches; it is reported apart, as
`cold`. Runs then alternate between intervals, so that a machine that slows down mid-way touches
every interval alike.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.job import run_job
from bulkinfer.runner.outdir.ledger import load_progress

REPO = Path(__file__).resolve().parents[1]


def write_input(path: Path, rows: int) -> None:
    generator = random.Random(0)
    with open(path, "w") as out:
        for index in range(rows):
            a, b = generator.randrange(1000), generator.randrange(1000)
            out.write(json.dumps({"id": index, "prompt": f"{a}+{b}="}) + "\n")


def one_run(data: Path, root: Path, commit_seconds: float) -> dict:
    output = root / f"out-{commit_seconds}-{time.monotonic_ns()}"
    config = JobConfig.from_settings(model=str(REPO / "examples" / "demo-model"), input=[str(data)],
                                     output=str(output), temperature=0, max_tokens=8,
                                     commit_seconds=commit_seconds)
    started = time.perf_counter()
    outcome = run_job(config)
    seconds = time.perf_counter() - started
    commits = len(load_progress(output / "ledger.jsonl").files)
    return {"commit_seconds": commit_seconds, "rows": outcome.rows_done, "seconds": round(seconds, 2),
            "rows_per_second": round(outcome.rows_done / seconds, 1), "commits": commits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seconds", type=float, nargs="+", default=[2, 10, 60])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        data = root / "in.jsonl"
        write_input(data, args.rows)
        cold = one_run(data, root, args.seconds[0])
        runs = [one_run(data, root, seconds) for _ in range(args.repeat) for seconds in args.seconds]
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "rows": args.rows, "cold": cold, "runs": runs}
    print(json.dumps(report, indent=1))
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
