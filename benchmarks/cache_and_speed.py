"""Random-weight shapes side by side on the CPU: decode-heavy throughput, and how many sequences of a long output
fit a 4 GiB budget, from the engine's own KV bytes per token and state bytes per sequence. A hybrid's fixed
state or a latent attention model's small cache shows against a dense model of the same width.

    python benchmarks/cache_and_speed.py 50m hybrid-50m > benchmarks/results/cpu-hybrid-50m-vs-50m.json
    python benchmarks/cache_and_speed.py 50m mla-50m > benchmarks/results/cpu-mla-50m-vs-50m.json
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
              "machine": f"{platform.machine()}, {os.cpu_count()} threads, load average {os.getloadavg()[0]:.1f}",
              "command": f"python benchmarks/cache_and_speed.py {' '.join(shapes)}",
              "workload": "16 requests x (64 prompt + 64 output tokens), greedy, float32, max_num_seqs 16"}
    for shape in shapes:
        llm = LLM(str(model_path(f"random:{shape}", "auto")), max_model_len=256, max_num_seqs=16)
        llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)  # warm-up
        start = time.perf_counter()
        llm.generate(prompts, PARAMS, use_tqdm=False)
        seconds = time.perf_counter() - start
        kv, state = llm.runner.kv_bytes_per_token, llm.runner.state_bytes_per_seq
        report[shape] = dict(seconds=round(seconds, 2), output_tok_s=round(16 * 64 / seconds, 1),
                             kv_bytes_per_token=kv, state_bytes_per_seq=state,
                             sequences_that_fit_4gib={length: BUDGET // (length * kv + state)
                                                      for length in (1024, 4096, 32768)})
        llm.close()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
