"""What a reasoning parser and a thinking budget cost in throughput: one workload, three engines.

- none: no reasoning parser, as a model auto does not recognise runs;
- deepseek_r1: every output is reasoning from its first token (no marker in the random prompts), so the
  parser looks at every token the model writes: the worst case for its cost;
- deepseek_r1 + budget: the same, each sample's reasoning closed after --budget tokens by forced tokens.

The model has random weights (bulkinfer bench's random:SHAPE); its tokenizer spells ``</think>`` in several
tokens, so the split-marker path is the one measured. One engine at a time, each timing the whole workload
through LLM.generate after a warm-up, --repeats times; the report gives the fastest run and its generated
tok/s (on a shared machine the fastest run is the one least disturbed).

    python benchmarks/reasoning_cost.py [--shape 50m] [--num-requests 64] [--repeats 3] [--budget 32]
"""

from __future__ import annotations

import argparse
import gc
import json
import time

from bulkinfer import LLM, SamplingParams
from bulkinfer.bench.run import machine_name, model_path
from bulkinfer.bench.systems import warm_up
from bulkinfer.bench.workloads import make_workload
from bulkinfer.engine.resolve import resolve_device
from bulkinfer.models.loader import read_config

# name -> (reasoning_parser, whether samples have a thinking budget)
ENGINES = {"none": ("none", False), "deepseek_r1": ("deepseek_r1", False), "deepseek_r1+budget": ("deepseek_r1", True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="50m")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=32)
    parser.add_argument("--output", help="also write the report to this JSON file")
    args = parser.parse_args()
    path = model_path(f"random:{args.shape}", "auto")
    vocab_size = read_config(path, "auto")[0].vocab_size
    requests = make_workload("mixed", args.num_requests, vocab_size)
    timings: dict[str, list[tuple[float, int]]] = {}
    for name, (parser_name, budgeted) in ENGINES.items():
        llm = LLM(str(path), reasoning_parser=parser_name)
        warm_up(llm, requests[0].prompt)
        params = [SamplingParams(max_tokens=r.max_tokens, temperature=0.0, ignore_eos=True,
                                 thinking_budget=args.budget if budgeted else None) for r in requests]
        timings[name] = [_timed(llm, [r.prompt for r in requests], params) for _ in range(args.repeats)]
        print(f"{name}: {[round(seconds, 2) for seconds, _ in timings[name]]} s", flush=True)
        llm.close()
        del llm
        gc.collect()
    results = {name: {"fastest_seconds": min(s for s, _ in runs), "generated_tokens": runs[0][1],
                      "tokens_per_second": runs[0][1] / min(s for s, _ in runs),
                      "seconds": [round(s, 2) for s, _ in runs]} for name, runs in timings.items()}
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "device": machine_name(resolve_device("auto")),
              "shape": args.shape, "num_requests": args.num_requests, "budget": args.budget, "results": results}
    for name, row in results.items():
        print(f"{name:>20}: {row['fastest_seconds']:7.2f} s, {row['tokens_per_second']:8.1f} tok/s "
              f"(runs {row['seconds']})")
    if args.output:
        with open(args.output, "w") as file:
            json.dump(report, file, indent=2)


def _timed(llm: LLM, prompts: list[list[int]], params: list[SamplingParams]) -> tuple[float, int]:
    before = llm.stats.generation_tokens
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - start, llm.stats.generation_tokens - before


if __name__ == "__main__":
    main()
