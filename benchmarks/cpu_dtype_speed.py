"""bulkinfer's generation in bf16 against fp32 on the CPU, timed in CPU seconds as well as wall seconds.

    python benchmarks/cpu_dtype_speed.py --num-requests 16 --dtype bfloat16 --dtype float32 \\
        --output benchmarks/results/cpu-50m-mixed-16-dtype-cputime.json

On a CPU that other work shares, wall time measures the neighbours as much as the code: this script also
reports the process's CPU seconds (one torch thread by default, so no thread spins waiting for another),
which moves far less with the load, and the load average around each run. Each dtype runs the bench's
``mixed`` workload on the bench's random 50M Llama after one warm-up pass, the dtypes taking turns, and the
best of ``--repeats`` counts. MFU: the workload's matmul FLOPs (the bench's count) per CPU second, against the
bench's matmul peak (the model's own projections at 2,048 rows, weights held as the engine holds them) measured
per CPU second too. ``PYTHONPATH=<another tree>/src`` times another version of bulkinfer with the same script.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.bench.peak import matmul_params, matmul_peak, model_flops, model_matmul_shapes
from bulkinfer.bench.run import model_path
from bulkinfer.bench.workloads import make_workload, useful_tokens


def timed(call) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``call()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:50m")
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--dtype", action="append", choices=("bfloat16", "float32"))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kv-cache-gb", type=float, default=1.0, help="each engine's KV pool (two share a process)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtypes = args.dtype or ["bfloat16", "float32"]
    llms = {dtype: LLM(str(model_path(args.model, dtype)), dtype=dtype, device="cpu",
                    kv_cache_memory_gb=args.kv_cache_gb) for dtype in dtypes}
    config = next(iter(llms.values())).model_config
    requests = make_workload("mixed", args.num_requests, config.vocab_size)
    prompts = [request.prompt for request in requests]
    params = [SamplingParams(max_tokens=request.max_tokens, temperature=0.0, ignore_eos=True) for request in requests]
    flops = model_flops(matmul_params(config), config.num_layers, config.num_heads * config.head_dim, requests, None)
    runs = {dtype: [] for dtype in dtypes}
    for llm in llms.values():
        llm.generate(prompts[:4], params[:4], use_tqdm=False)  # warm-up: oneDNN's kernels, Inductor's compile
    for _ in range(args.repeats):
        for dtype, llm in llms.items():
            wall, cpu = timed(lambda llm=llm: llm.generate(prompts, params, use_tqdm=False))
            runs[dtype].append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                "load_average": [round(load, 2) for load in os.getloadavg()]})
    useful = useful_tokens(requests)
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "threads": args.threads,
              "model": args.model, "workload": "mixed", "requests": args.num_requests, "useful_output_tokens": useful,
              "prompt_tokens": sum(len(prompt) for prompt in prompts), "dtypes": {}}
    for dtype, dtype_runs in runs.items():
        best = min(dtype_runs, key=lambda run: run["cpu_s"])
        peak = matmul_peak(model_matmul_shapes(config, (2048,), args.num_requests), getattr(torch, dtype),
                           torch.device("cpu"), clock=time.process_time).tflops
        report["dtypes"][dtype] = {"runs": dtype_runs, "useful_tok_per_cpu_s": round(useful / best["cpu_s"], 1),
                                   "useful_tok_per_wall_s": round(useful / min(r["wall_s"] for r in dtype_runs), 1),
                                   "peak_tflops_per_cpu_s": round(peak, 3),
                                   "mfu_cpu": round(flops / best["cpu_s"] / 1e12 / peak, 3)}
    print(json.dumps(report, indent=2))
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
