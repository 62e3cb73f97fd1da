"""The mixture-of-experts bench model against the dense one with the same active parameters, in CPU time.

Wall time on a machine shared with other work moves by 2-3x between runs, and more for the MoE
model (its many small matmuls each wait for both threads). One thread's CPU time hardly moves, so
this runs `bulkinfer bench`'s mixed workload on one thread in fresh processes, the models taking
turns, and reports the median CPU time of generate() for each (warm-up excluded). A second part
times one MLP layer (8 layers' weights, so they come from memory as in the model) per token count.

    python benchmarks/moe_cpu_time.py [--num-requests 64] [--repeats 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MODELS = ("50m", "moe-small")
TOKEN_COUNTS = (1, 8, 32, 64, 128, 256, 512, 2048)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", help="also write the report to this JSON file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_workload(args.child, args.num_requests) if args.child in MODELS else _layers()))
        return
    runs: dict[str, list[float]] = {model: [] for model in MODELS}
    for repeat in range(args.repeats):
        for model in MODELS if repeat % 2 == 0 else MODELS[::-1]:
            runs[model].append(_child(model, args.num_requests)["cpu_s"])
    dense, moe = (statistics.median(runs[model]) for model in MODELS)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, 1 thread",
              "workload": f"mixed, {args.num_requests} requests", "cpu_s": runs,
              "median_cpu_s": {"50m": dense, "moe-small": moe}, "ratio": round(moe / dense, 3),
              "mlp_layer_ms": _child("layers", 0)}
    print(json.dumps(report, indent=1))
    if args.output:
        with open(args.output, "w") as file:
            json.dump(report, file, indent=1)


def _child(what: str, num_requests: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--child", what, "--num-requests", str(num_requests)]
    return json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)


def _workload(shape: str, num_requests: int) -> dict:
    from bulkinfer import LLM, SamplingParams
    from bulkinfer.bench.run import model_path
    from bulkinfer.bench.systems import warm_up
    from bulkinfer.bench.workloads import make_workload
    from bulkinfer.models.loader import read_config

    path = model_path(f"random:{shape}", "auto")
    requests = make_workload("mixed", num_requests, read_config(path)[0].vocab_size, 0)
    llm = LLM(str(path), max_model_len=max(len(r.prompt) + r.max_tokens for r in requests))
    params = [SamplingParams(n=r.n, max_tokens=r.max_tokens, temperature=0.0, ignore_eos=True, seed=i)
              for i, r in enumerate(requests)]
    warm_up(llm, requests[0].prompt)
    cpu, wall = time.process_time(), time.perf_counter()
    llm.generate([r.prompt for r in requests], params, use_tqdm=False)
    return {"cpu_s": round(time.process_time() - cpu, 2), "wall_s": round(time.perf_counter() - wall, 2)}


def _layers() -> dict:
    """Best-of-N thread CPU time of one MLP layer, dense (1,408 wide) and MoE (8 experts of 704, top-2)."""
    import torch

    from bulkinfer.kernels.silu_mul import silu_and_mul_ref
    from bulkinfer.layers.linear import linear
    from bulkinfer.layers.moe import Routing, route
    from bulkinfer.layers.ops import CPU_OPS

    torch.manual_seed(0)
    hidden, experts, inter, dense_inter = 512, 8, 704, 1408
    layers = [{"w13": torch.randn(experts, 2 * inter, hidden) / 20, "w2": torch.randn(experts, hidden, inter) / 20,
               "gate": torch.randn(experts, hidden) / 20, "d13": torch.randn(2 * dense_inter, hidden) / 20,
               "d2": torch.randn(hidden, dense_inter) / 20} for _ in range(8)]

    def dense(x):
        for p in layers:
            linear(silu_and_mul_ref(linear(x, p["d13"])), p["d2"])

    def moe(x):
        for p in layers:
            CPU_OPS.fused_moe(x, p["w13"], p["w2"], *route(linear(x, p["gate"]), Routing(2, True)))

    def best_ms(run, x) -> float:
        run(x)
        times = []
        for _ in range(max(5, min(30, 3000 // x.shape[0]))):
            start = time.thread_time()
            run(x)
            times.append(time.thread_time() - start)
        return round(min(times) * 1e3 / len(layers), 3)

    return {str(t): {"dense": best_ms(dense, x), "moe": best_ms(moe, x)}
            for t in TOKEN_COUNTS for x in [torch.randn(t, hidden)]}


if __name__ == "__main__":
    main()
