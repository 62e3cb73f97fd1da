"""What a short CPU job pays in a new process to compile its decode attention, cold and warm.

Runs the bench's workload through the engine in a fresh process, twice in a row on one Inductor cache
folder (empty at first unless --cache-dir names one): the first process compiles, the second should
find everything in the cache. Each process reports its model load, its first compiled decode step
(bench's warm-up step) against the same step run again (the difference is what the compile cost
that step, in wall seconds and in CPU seconds of the process and the helpers it waited for: on a
busy machine the CPU seconds say what the wall time would be on a quiet one), the workload once
warm, and Inductor's cache counters. With --static, transformers' static batching runs the workload
too, and each process's speedup over it is given with the compile counted in.

    python benchmarks/compile_cost.py [--model random:50m] [--num-requests 96] [--dtype auto] [--static]
        [--cache-dir DIR] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:50m")
    parser.add_argument("--num-requests", type=int, default=96)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--static", action="store_true", help="also time transformers' static batching")
    parser.add_argument("--cache-dir", type=Path, help="Inductor's cache folder (default: a new empty one)")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_one_process(args.model, args.num_requests, args.dtype)))
        return
    with tempfile.TemporaryDirectory(prefix="bulkinfer-inductor-") as scratch:
        cache = args.cache_dir or Path(scratch)
        report = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average": os.getloadavg(), "cache_dir": str(cache),
                  "processes": [_fresh_process(args, cache) for _ in range(2)]}
    if args.static:
        report["static_seconds"] = static = _static_seconds(args.model, args.num_requests, args.dtype)
        for process in report["processes"]:
            process["speedup_with_compile"] = round(static / (process["workload_s"] + process["compile_s"]), 2)
            process["speedup_warm"] = round(static / process["workload_s"], 2)
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


def _fresh_process(args, cache: Path) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    command = [sys.executable, __file__, "--child", "--model", args.model, "--num-requests", str(args.num_requests),
               "--dtype", args.dtype]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return {"process_s": round(time.perf_counter() - start, 2), **json.loads(result.stdout.splitlines()[-1])}


def _workload(model: str, num_requests: int, dtype: str):
    from bulkinfer.bench.run import model_path
    from bulkinfer.bench.workloads import make_workload
    from bulkinfer.models.loader import read_config

    path = model_path(model, dtype)
    requests = make_workload("mixed", num_requests, read_config(path)[0].vocab_size)
    return path, requests


def _one_process(model: str, num_requests: int, dtype: str) -> dict:
    from torch._dynamo.utils import compilation_time_metrics, counters

    from bulkinfer.bench.systems import warm_up
    from bulkinfer.engine.llm import LLM
    from bulkinfer.sampling_params import SamplingParams

    path, requests = _workload(model, num_requests, dtype)
    start = time.perf_counter()
    llm = LLM(str(path), dtype=dtype, max_model_len=max(len(r.prompt) + r.max_tokens for r in requests))
    loaded, loaded_cpu = time.perf_counter(), _cpu_seconds()
    warm_up(llm, requests[0].prompt)
    first, first_cpu = time.perf_counter(), _cpu_seconds()
    warm_up(llm, requests[0].prompt)
    again, again_cpu = time.perf_counter(), _cpu_seconds()
    params = [SamplingParams(max_tokens=r.max_tokens, temperature=0.0, ignore_eos=True) for r in requests]
    llm.generate([r.prompt for r in requests], params, use_tqdm=False)
    done = time.perf_counter()
    return {"dtype": str(llm.config.dtype).removeprefix("torch."), "load_s": round(loaded - start, 2),
            "first_step_s": round(first - loaded, 2), "same_step_again_s": round(again - first, 2),
            "compile_s": round((first - loaded) - (again - first), 2),
            "compile_cpu_s": round((first_cpu - loaded_cpu) - (again_cpu - first_cpu), 2),
            "workload_s": round(done - again, 2),
            "dynamo_compile_s": round(sum(compilation_time_metrics.get("_compile.compile_inner", [])), 2),
            "inductor": dict(counters["inductor"]), "graphs": counters["stats"]["unique_graphs"]}


def _cpu_seconds() -> float:
    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def _static_seconds(model: str, num_requests: int, dtype: str) -> float:
    import torch

    from bulkinfer.bench.systems import run_hf_static
    from bulkinfer.engine.resolve import resolve_dtype
    from bulkinfer.models.loader import read_config

    path, requests = _workload(model, num_requests, dtype)
    device = torch.device("cpu")
    torch_dtype = resolve_dtype(dtype, read_config(path)[0], device).dtype  # as the engine resolves it
    return round(run_hf_static(path, requests, 0.0, torch_dtype, device).seconds, 2)


if __name__ == "__main__":
    main()
