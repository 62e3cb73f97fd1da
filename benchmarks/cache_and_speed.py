"""Random-weight shapes side by side on the CPU: decode-heavy throughput, and how many sequences of a long output
fit a 4 GiB budget, from the engine's own KV bytes per token and state bytes per sequence. A hybrid's fixed
state or a latent attention model's small cache shows against a dense model of the same width. Each model's
CPU seconds are reported beside its wall time: on a machine shared with other work, run it with
OMP_NUM_THREADS=1 and compare those, which other processes do not inflate.

    python benchmarks/cache_and_speed.py 50m hybrid-50m > benchmarks/results/cpu-hybrid-50m-vs-50m.json
    OMP_NUM_THREADS=1 python benchmarks/cache_and_speed.py 50m mla-50m
"""

import json
import os
import platform
import sys
import time

import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.bench.run import model_path

BUDGET = 4 << 30
PARAMS = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)


def main(shapes: list[str]) -> None:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(200, 30000, (64,), generator=generator).tolist() for _ in range(16)]
    report = {"date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} threads, load average {os.getloadavg()[0]:.1f}, "
                         f"torch on {torch.get_num_threads()} threads",
              "command": f"{_threads_env()}python benchmarks/cache_and_speed.py {' '.join(shapes)}",
              "workload": "16 requests x (64 prompt + 64 output tokens), greedy, float32, max_num_seqs 16"}
    for shape in shapes:
        llm = LLM(str(model_path(f"random:{shape}", "auto")), max_model_len=256, max_num_seqs=16,
                  dtype="float32")
        llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)  # warm-up
        start, cpu_start = time.perf_counter(), time.process_time()
        llm.generate(prompts, PARAMS, use_tqdm=False)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        kv, state = llm.runner.kv_bytes_per_token, llm.runner.state_bytes_per_seq
        report[shape] = dict(seconds=round(seconds, 2), cpu_seconds=round(cpu_seconds, 2),
                             output_tok_s=round(16 * 64 / seconds, 1),
                             kv_bytes_per_token=kv, state_bytes_per_seq=state,
                             sequences_that_fit_4gib={length: BUDGET // (length * kv + state)
                                                      for length in (1024, 4096, 32768)})
        llm.close()
    print(json.dumps(report, indent=1))


def _threads_env() -> str:
    threads = os.environ.get("OMP_NUM_THREADS")
    return f"OMP_NUM_THREADS={threads} " if threads else ""


if __name__ == "__main__":
    main(sys.argv[1:])
