"""What reading inputs from object storage costs: rows per second of reading alone and of the demo job, with
the input on a local S3-protocol server (moto's, in its own process) against the same input on local files.

    python benchmarks/remote_inputs.py --rows 2000 --read-rows 200000 --repeat 2 --output results.json

The job is commit_cadence.py's: the demo model over `--rows` addition problems, greedy, 8 tokens, after a
cold run that warms the model. Reading is read_rows over `--read-rows` rows, as JSONL and as Parquet.
Runs alternate between local and S3, so that a machine that slows down mid-way touches both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.json as pj
import pyarrow.parquet as pq
from commit_cadence import REPO, write_input

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.job import run_job
from bulkinfer.runner.readers import read_rows
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import resolve_sources, scan_inputs


def start_server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, endpoint
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto's server did not start")


def upload(files: list[Path]) -> dict[str, str]:
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.mkdir("bench")
    for file in files:
        fs.put_file(str(file), f"bench/{file.name}")
    return {file.name: f"s3://bench/{file.name}" for file in files}


def read_speed(where: str, url: str) -> dict:
    files = scan_inputs(resolve_sources([url]))
    started = time.perf_counter()
    rows = sum(1 for _ in read_rows(files, RowSet(), 10_000, reserved=()))
    seconds = time.perf_counter() - started
    return {"read": url.rsplit(".", 1)[-1], "where": where, "rows": rows, "seconds": round(seconds, 2),
            "rows_per_second": round(rows / seconds)}


def job_speed(where: str, url: str, root: Path) -> dict:
    output = root / f"out-{where}-{time.monotonic_ns()}"
    config = JobConfig.from_settings(model=str(REPO / "examples" / "demo-model"), input=[url], output=str(output),
                                     temperature=0, max_tokens=8)
    started = time.perf_counter()
    outcome = run_job(config)
    seconds = time.perf_counter() - started
    return {"job": "demo", "where": where, "rows": outcome.rows_done, "seconds": round(seconds, 2),
            "rows_per_second": round(outcome.rows_done / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--read-rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    server, _ = start_server()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            job_input, big = root / "job.jsonl", root / "read.jsonl"
            write_input(job_input, args.rows)
            write_input(big, args.read_rows)
            pq.write_table(pj.read_json(big), root / "read.parquet")
            local = {path.name: str(path) for path in (job_input, big, root / "read.parquet")}
            remote = upload([job_input, big, root / "read.parquet"])
            places = {"local": local, "s3": remote}
            cold = job_speed("local", local["job.jsonl"], root)
            reads = [read_speed(where, urls[name]) for _ in range(args.repeat) for where, urls in places.items()
                     for name in ("read.jsonl", "read.parquet")]
            jobs = [job_speed(where, urls["job.jsonl"], root) for _ in range(args.repeat)
                    for where, urls in places.items()]
    finally:
        server.terminate()
        server.wait()
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "rows": args.rows, "read_rows": args.read_rows,
              "cold": cold, "reads": reads, "jobs": jobs}
    print(json.dumps(report, indent=1))
    if args.output:
        args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
