"""The transformers path against the native one on the same checkpoint: prefill and whole-job throughput.

    python benchmarks/model_impl_speed.py --model random:50m --requests 32 --rounds 4 --output results.json

Both engines live in one process and take turns on the same workload (the bench's mixed one, a new
seed each round, the order of the two swapped each round), so a machine whose load changes mid-way
weighs on both alike. Each round times the prefill alone (``max_tokens=1``) and then the whole
workload; the ratios are transformers / native throughput, and the medians over rounds are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bulkinfer import LLM, SamplingParams
from bulkinfer.bench.run import model_path
from bulkinfer.bench.workloads import make_workload

IMPLS = ("native", "transformers")


def timed(llm: LLM, prompts: list[list[int]], params: list[SamplingParams]) -> tuple[float, int]:
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - started, sum(len(o.outputs[0].token_ids) for o in outputs)


def one_round(llms: dict[str, LLM], vocab: int, requests: int, seed: int) -> dict:
    workload = make_workload("mixed", requests, vocab, seed)
    prompts = [r.prompt for r in workload]
    prompt_tokens = sum(map(len, prompts))
    first = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    whole = [SamplingParams(temperature=0, max_tokens=r.max_tokens, ignore_eos=True) for r in workload]
    result = {}
    for impl in IMPLS if seed % 2 == 0 else IMPLS[::-1]:
        prefill_seconds, _ = timed(llms[impl], prompts, [first] * len(prompts))
        seconds, output_tokens = timed(llms[impl], prompts, whole)
        result[impl] = {"prefill_seconds": round(prefill_seconds, 2),
                        "prompt_tok_s": round(prompt_tokens / prefill_seconds, 1),
                        "seconds": round(seconds, 2), "output_tok_s": round(output_tokens / seconds, 1)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random:50m")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    path = str(model_path(args.model, "float32"))
    llms = {impl: LLM(path, model_impl=impl, device="cpu", max_model_len=1300, enable_prefix_caching=False)
            for impl in IMPLS}
    vocab = llms["native"].model_config.vocab_size
    one_round(llms, vocab, 4, seed=1000)  # warm-up: first-use costs (oneDNN kernels, compiled attention)
    rounds = [one_round(llms, vocab, args.requests, seed) for seed in range(args.rounds)]
    ratio = {key: round(statistics.median(r["transformers"][key] / r["native"][key] for r in rounds), 3)
             for key in ("prompt_tok_s", "output_tok_s")}
    report = {"model": args.model, "requests": args.requests, "rounds": rounds, "transformers_over_native": ratio}
    print(json.dumps(ratio))
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
