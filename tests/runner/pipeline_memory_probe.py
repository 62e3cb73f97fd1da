"""Load a model as a pipeline stage does, release it as the next stage with another model would, and print
the resident memory (MB) and seconds at each point, as JSON: run in a fresh process so that nothing else
in it holds memory.

    python pipeline_memory_probe.py CHECKPOINT DATA.jsonl OUT_DIR
"""

import json
import sys
import time
from pathlib import Path

import bulkinfer.engine.llm  # noqa: F401 - torch and the engine's code are loaded before the first figure
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.pipeline.models import SharedModel


def resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(model: str, data: str, out: str) -> None:
    config = JobConfig.from_settings(model=model, input=[data], output=out, kv_cache_memory_gb=0.25, max_tokens=2)
    models = SharedModel()
    figures = {"start": resident_mb()}
    started = time.perf_counter()
    with models.engine(config) as llm:
        llm.generate(["hello world"] * 4, use_tqdm=False)
    del llm  # the pipeline's jobs hold it only while they run
    figures["load_s"] = time.perf_counter() - started
    figures["loaded"] = resident_mb()
    with models.engine(config):  # the same model and settings: kept
        figures["reused_loads"] = models.loads
    started = time.perf_counter()
    models.release()
    figures["release_s"] = time.perf_counter() - started
    figures["released"] = resident_mb()
    print(json.dumps(figures))


if __name__ == "__main__":
    main(*sys.argv[1:4])
