"""Run a pure-transform pipeline over a large input in a fresh process and print, as JSON, how much its
peak resident memory grew (MB) while the pipeline's output was exported to JSONL and Parquet (`stream`),
or while its first stage's rows were held as one list (`hold`): what holding a stage takes.

    python pipeline_stream_probe.py stream|hold DATA.jsonl SMALL.jsonl OUT_DIR
"""

import json
import sys
from pathlib import Path

from bulkinfer.runner.pipeline.progress import export_pipeline
from bulkinfer.runner.pipeline.run import Pipeline

# Best-of-4 over rows that share a source_row four by four: filter, template, explode (nothing to
# explode without a model), then keep the best of each source row.
STAGES = [
    {"name": "shape", "filter": "n % 10 != 3", "prompt_template": "Say {word} {n}", "explode": True},
    {"name": "best", "rank_by": "score", "keep_top": 1},
]


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def export_both(data: str, out: Path) -> int:
    pipeline = Pipeline(data, out, STAGES)
    pipeline.run()
    jsonl = export_pipeline(out, out / "final.jsonl")
    export_pipeline(out, out / "final.parquet")
    return jsonl.rows


def main(mode: str, data: str, small: str, out: str) -> None:
    export_both(small, Path(out) / "warm")  # every module and code path loaded before the first figure
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from what is resident now
    start = status_mb("VmRSS")
    if mode == "stream":
        rows = export_both(data, Path(out) / "big")
    else:
        rows = len(Pipeline(data, Path(out) / "big", STAGES).rows("shape"))
    print(json.dumps({"rows": rows, "growth_mb": status_mb("VmHWM") - start, "start_mb": start}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
