"""Decode step time against the memory-bandwidth floor.

A decode step reads every weight once and every cached key and value of its batch once, so no
engine can run it faster than those bytes over the device's copy bandwidth. The probe fills the
engine with one batch of same-length prompts, steps until every prefill is done, then times steps
in which each sequence decodes one token. On a GPU the aim is to come within 1.5x of the floor at a
large batch; on a CPU the matmuls' arithmetic, not memory, bounds the step, and the ratio shows by
how much.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bulkinfer.bench.peak import matmul_params
from bulkinfer.sampling_params import SamplingParams

# Sequences, prompt tokens each, and decode steps timed: large batches, sized so the CPU's run
# stays short (its prefill of 64 x 256 tokens takes about 10 s on the 50M model).
PROBE_SIZES = {"cpu": (64, 256, 16), "cuda": (256, 1024, 32)}


@dataclass(frozen=True)
class DecodeProbe:
    batch: int
    prompt_tokens: int
    steps: int
    seconds: float  # the timed steps together
    bytes_read: int  # weights once per step plus every cached key and value each step attends to

    def report(self, copy_bytes_per_s: float) -> dict:
        floor = self.bytes_read / copy_bytes_per_s
        return {"batch": self.batch, "prompt_tokens": self.prompt_tokens, "steps": self.steps,
                "step_ms": round(self.seconds / self.steps * 1e3, 3),
                "floor_ms": round(floor / self.steps * 1e3, 3), "vs_floor": round(self.seconds / floor, 2)}


def probe_decode(llm) -> DecodeProbe:
    batch, prompt_len, steps, max_tokens = _sizes(llm)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    rng = np.random.default_rng(1)
    for index in range(batch):
        llm.add_request(f"decode-probe-{index}", rng.integers(4, llm.model_config.vocab_size, prompt_len).tolist(),
                        params)
    stats = llm.stats
    generated_before = stats.generation_tokens
    # Prefill chunks, with the sequences whose prompts are done already decoding beside them.
    if not any(_was_pure_decode(llm, batch) for _ in range(max_tokens - steps)):
        raise RuntimeError("the decode probe never reached a step of decodes alone")
    generated = stats.generation_tokens - generated_before
    start = time.perf_counter()
    for _ in range(steps):
        llm.step()  # returns once the step's tokens are on the host: the device is done with it
    seconds = time.perf_counter() - start
    if stats.generation_tokens - generated_before != generated + steps * batch:
        raise RuntimeError("the decode probe's batch did not stay whole through the timed steps")
    while llm.has_unfinished_requests():
        llm.step()
    # Timed step j attends over every prompt, the tokens generated before timing, and j more per sequence.
    kv_tokens = steps * (batch * prompt_len + generated) + batch * steps * (steps - 1) // 2
    return DecodeProbe(batch, prompt_len, steps, seconds,
                       steps * _weight_bytes(llm) + kv_tokens * _kv_bytes_per_token(llm))


def _sizes(llm) -> tuple[int, int, int, int]:
    """The probe's batch, prompt length, timed steps and max_tokens, cut to what the engine holds."""
    config = llm.config
    batch, prompt_len, steps = PROBE_SIZES[config.device.type]
    batch = min(batch, config.options.max_num_seqs, config.max_num_batched_tokens // 2)
    prompt_len = min(prompt_len, llm.max_model_len // 2)
    # Decoding rows take their share of each step's token budget while the other prompts prefill.
    prefill_steps = -(-batch * prompt_len // (config.max_num_batched_tokens - batch)) + 1
    max_tokens = min(prefill_steps + steps + 2, llm.max_model_len - prompt_len)
    blocks_per_seq = -(-(prompt_len + max_tokens) // config.options.block_size)
    batch = min(batch, llm.stats.kv_blocks_total // blocks_per_seq)
    if batch < 1 or max_tokens <= steps:
        raise ValueError("the engine is too small for the decode probe")
    return batch, prompt_len, steps, max_tokens


def _was_pure_decode(llm, batch: int) -> bool:
    stats = llm.stats
    prompt, generated = stats.prompt_tokens, stats.generation_tokens
    llm.step()
    return stats.prompt_tokens == prompt and stats.generation_tokens - generated == batch


def _weight_bytes(llm) -> int:
    """The bytes of the weights a decode step multiplies by: quantized ones as they are stored."""
    if llm.model_config.quantization is None:
        return matmul_params(llm.model_config, active=False) * llm.config.dtype.itemsize
    model = llm.runner.model
    stored = {id(t): t.nbytes for t in [*model.parameters(), *model.buffers()]}  # a tied head counts once
    # The embedding is looked up, not multiplied: only its rows of the batch are read.
    embedding = model.model.embed_tokens.weight
    return sum(stored.values()) - (0 if model.lm_head.weight is embedding else embedding.nbytes)


def _kv_bytes_per_token(llm) -> int:
    return llm.stats.kv_bytes_per_token  # the cache's own dtype: one byte per element with fp8_e4m3
