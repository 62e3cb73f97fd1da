"""The systems under comparison, each timed on the same requests, model and device.

- bulkinfer: the whole workload through LLM.generate.
- static: transformers' generate on padded batches of 16 in input order, as written by hand.
- continuous: transformers' own continuous batching manager, each request with its own max_tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bulkinfer.bench.workloads import BenchRequest

STATIC_BATCH = 16


@dataclass
class Timing:
    system: str
    seconds: float
    generated_tokens: int  # what the system produced, padding and over-generation included
    computed_prompt_tokens: int | None = None  # bulkinfer only: prompt tokens not served by the cache


def run_bulkinfer(path: Path, requests: list[BenchRequest], temperature: float, **engine_args) -> Timing:
    from bulkinfer import LLM, SamplingParams

    llm = LLM(str(path), **engine_args)
    params = [SamplingParams(n=r.n, max_tokens=r.max_tokens, temperature=temperature, ignore_eos=True, seed=i)
              for i, r in enumerate(requests)]
    llm.generate([r.prompt for r in requests[:4]], params[:4], use_tqdm=False)  # warm-up
    stats_before = (llm.stats.prompt_tokens, llm.stats.generation_tokens)
    start = time.perf_counter()
    llm.generate([r.prompt for r in requests], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return Timing("bulkinfer", seconds, llm.stats.generation_tokens - stats_before[1],
                  llm.stats.prompt_tokens - stats_before[0])


def _hf_model(path: Path, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()


def run_hf_static(path: Path, requests: list[BenchRequest], temperature: float, dtype: torch.dtype,
                  device: torch.device) -> Timing:
    model = _hf_model(path, dtype, device)
    generated = 0
    start = time.perf_counter()
    for first in range(0, len(requests), STATIC_BATCH):
        batch = requests[first:first + STATIC_BATCH]
        generated += _static_batch(model, batch, temperature, device)
    return Timing("static", time.perf_counter() - start, generated)


def _static_batch(model, batch: list[BenchRequest], temperature: float, device: torch.device) -> int:
    longest = max(len(r.prompt) for r in batch)
    pad = model.config.pad_token_id or 0
    ids = torch.tensor([[pad] * (longest - len(r.prompt)) + r.prompt for r in batch], device=device)
    mask = torch.tensor([[0] * (longest - len(r.prompt)) + [1] * len(r.prompt) for r in batch], device=device)
    new_tokens = max(r.max_tokens for r in batch)
    sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, num_return_sequences=batch[0].n, pad_token_id=pad,
                             **sampling)
    return (out.shape[1] - longest) * out.shape[0]


def run_hf_continuous(path: Path, requests: list[BenchRequest], temperature: float, dtype: torch.dtype,
                      device: torch.device) -> Timing:
    from transformers import GenerationConfig

    model = _hf_model(path, dtype, device)
    config = GenerationConfig(max_new_tokens=max(r.max_tokens for r in requests), eos_token_id=-1,
                              do_sample=temperature > 0, temperature=temperature or None,
                              num_return_sequences=requests[0].n)
    generated, expected = 0, sum(r.n for r in requests)
    start = time.perf_counter()
    with model.continuous_batching_context_manager(generation_config=config, block=True, timeout=5) as manager:
        for index, r in enumerate(requests):
            manager.add_request(r.prompt, request_id=f"r{index}", max_new_tokens=r.max_tokens, eos_token_id=-1)
        finished = 0
        while finished < expected:
            result = manager.get_result(timeout=60)
            if result is None:
                raise RuntimeError("transformers' continuous batching stopped answering")
            if result.is_finished():
                finished += 1
                generated += len(result.generated_tokens)
    return Timing("continuous", time.perf_counter() - start, generated)
