"""The systems under comparison, each timed on the same requests, model and device.

- bulkinfer: the whole workload through LLM.generate, then its decode probe (decode_floor.py).
- static: transformers' generate on padded batches of 16 in input order, as written by hand.
- continuous: transformers' own continuous batching manager, each request with its own max_tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from bulkinfer.bench.decode_floor import DecodeProbe, probe_decode
from bulkinfer.bench.workloads import BenchRequest
from bulkinfer.engine.config import BATCHED_TOKENS, EngineConfig
from bulkinfer.engine.grammar_masks import GrammarMasks
from bulkinfer.engine.llm import LLM
from bulkinfer.kernels.paged_attention_cpu import MIN_KEYS
from bulkinfer.sampling_params import SamplingParams

STATIC_BATCH = 16


@dataclass
class Timing:
    system: str
    seconds: float
    generated_tokens: int  # what the system produced, padding and over-generation included
    computed_prompt_tokens: int | None = None  # bulkinfer only: prompt tokens not served by the cache
    decode: DecodeProbe | str | None = None  # bulkinfer only: its decode probe, or why the probe failed
    grammar: dict | None = None  # bulkinfer with a schema: mask times and jump-forward (see grammar_report)


def run_bulkinfer(path: Path, requests: list[BenchRequest], temperature: float, schema: dict | None = None,
                  probe: bool = True, **engine_args) -> Timing:
    """schema: constrain every request's output to it (the grammar is compiled before the timing).
    probe: time a decode step afterwards (decode_floor.py); once per benchmark is enough."""
    llm = LLM(str(path), **engine_args)
    params = [SamplingParams(n=r.n, max_tokens=r.max_tokens, temperature=temperature, ignore_eos=True, seed=i,
                             json=schema) for i, r in enumerate(requests)]
    warm_up(llm, requests[0].prompt)
    if schema is not None:
        llm.generate([requests[0].prompt], params[0], use_tqdm=False)
    stats_before = (llm.stats.prompt_tokens, llm.stats.generation_tokens)
    grammar_before = _grammar_counters(llm.stats)
    start = time.perf_counter()
    llm.generate([r.prompt for r in requests], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    timing = Timing("bulkinfer" if schema is None else "bulkinfer-json", seconds,
                    llm.stats.generation_tokens - stats_before[1], llm.stats.prompt_tokens - stats_before[0])
    if schema is not None:
        timing.grammar = grammar_report(llm, grammar_before, params[0])
        return timing  # the decode probe belongs to the unconstrained run
    if not probe:
        return timing
    try:
        timing.decode = probe_decode(llm)
    except (RuntimeError, ValueError) as exc:  # reported beside the throughput, which still counts
        timing.decode = str(exc)
    return timing


def warm_up(llm, tokens: list[int]) -> None:
    """One decode step big enough for the CPU's compiled attention, so its one-time compile (like
    CUDA graph capture on a GPU) falls outside the timing. Copies of one prompt: one prefill."""
    rows = 32
    prompt = (tokens * (MIN_KEYS // len(tokens) + 1))[:MIN_KEYS // rows + 1]
    llm.generate([prompt] * rows, SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)


def quiet_third_party_logs() -> None:
    """Only the report speaks: transformers' warnings and load bars say nothing about the benchmark, and
    its continuous batching logs an ERROR on the CPU without psutil, for a memory figure it does not need.
    Levels are set per logger (its own, "ContinuousBatchingLogger", does not propagate to "transformers"),
    so that a real failure still raises and stderr still shows whatever else goes wrong."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.CRITICAL)


def _hf_model(path: Path, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False).to(device).eval()


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
    # generate_batch takes one max_new_tokens for every prompt, so the requests go to the manager one by one.
    manager = model.init_continuous_batching(generation_config=config,
                                             continuous_batching_config=_continuous_config(requests, device))
    manager.warmup()  # allocates the paged cache (and on a GPU captures CUDA graphs) before the clock starts
    manager.start()
    try:
        start = time.perf_counter()
        for index, r in enumerate(requests):
            manager.add_request(r.prompt, request_id=f"r{index}", max_new_tokens=r.max_tokens, eos_token_id=-1)
        generated = _collect(manager, sum(r.n for r in requests))
        seconds = time.perf_counter() - start
    finally:
        # No join timeout: past one, stop() clears the batch processor under the loop's still-running step, and the
        # loop then dies with "Tried to perform a generation step before the batch processor was initialized".
        # A hard stop ends the loop after its current step; once every result is in, nothing is pending anyway.
        manager.stop(block=True, hard_stop=True)
        manager.destroy()
    return Timing("continuous", seconds, generated)


def _continuous_config(requests: list[BenchRequest], device: torch.device):
    """transformers' defaults are sized for a GPU: 8,192 batch tokens and a cache from 60% of free RAM on the CPU.

    Its SDPA path attends over the whole batch as one sequence under a block-diagonal mask [M, cached + M], so an
    8,192-token step costs about 20 s on the 50M model on 2 cores. We give it bulkinfer's default step budget and
    request cap instead, and a cache that holds the whole workload at once, so its size does not depend on how
    much memory the machine happens to have free.
    """
    from transformers import ContinuousBatchingConfig

    page_size = ContinuousBatchingConfig.page_size
    num_blocks = sum(r.n * -(-(len(r.prompt) + r.max_tokens) // page_size) for r in requests)
    # bulkinfer's own defaults, so both systems run steps of the same size
    return ContinuousBatchingConfig(max_batch_tokens=BATCHED_TOKENS[device.type],
                                    max_requests_per_batch=EngineConfig().max_num_seqs, num_blocks=num_blocks)


def _collect(manager, expected: int) -> int:
    """Waits for `expected` finished results, as long as the generation loop lives; returns the tokens generated."""
    generated = finished = 0
    while finished < expected:
        result = manager.get_result(timeout=1)
        if result is None:
            if not manager.is_running():
                error = manager.background_thread_status.fatal_error
                raise RuntimeError(f"transformers' continuous batching loop stopped: {error}")
            continue
        if result.error is not None:
            raise RuntimeError(f"transformers' continuous batching failed request {result.request_id}: {result.error}")
        if result.is_finished():
            finished += 1
            generated += len(result.generated_tokens)
    return generated


def _grammar_counters(stats) -> tuple[float, int, int, int]:
    return (stats.grammar_mask_seconds, stats.grammar_mask_steps, stats.grammar_mask_rows, stats.jump_forward_tokens)


def grammar_report(llm: LLM, before: tuple[float, int, int, int], params: SamplingParams) -> dict:
    """The run's mask time per step and rows per step, tokens jumped, and a probe at exactly 256 rows."""
    seconds, steps, rows, jumped = (now - then for now, then in zip(_grammar_counters(llm.stats), before))
    return {"mask_ms_per_step": round(1000 * seconds / max(steps, 1), 3),
            "rows_per_step": round(rows / max(steps, 1), 1), "mask_us_per_row": round(1e6 * seconds / max(rows, 1), 2), "masked_steps": steps,
            "jump_forward_tokens": jumped, "probe_256": probe_masks(llm, params)}


def probe_masks(llm: LLM, params: SamplingParams, rows: int = 256, steps: int = 32) -> dict:
    """Masks for 256 rows of the schema, each row taking a random allowed token per step: the time per step."""
    template = llm.grammars.get(params.constraint).result()
    matchers = [template.deep_copy() for _ in range(rows)]
    masks = GrammarMasks(llm.model_config.vocab_size, rows, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    times = []
    try:
        for _ in range(steps):
            seqs = [SimpleNamespace(matcher=matcher, grammar_active=True) for matcher in matchers]
            logits = torch.zeros(rows, llm.model_config.vocab_size)
            start = time.perf_counter()
            masks.apply(masks.start(seqs), logits)
            times.append(time.perf_counter() - start)
            tokens = torch.multinomial(logits.softmax(-1), 1, generator=generator).flatten().tolist()
            for index, (matcher, token) in enumerate(zip(matchers, tokens)):
                if not matcher.consume_token(token) or matcher.is_stopped():
                    matchers[index] = template.deep_copy()
    finally:
        masks.close()
    return {"rows": rows, "steps": steps, "step_ms": round(1000 * sum(times) / steps, 3)}
