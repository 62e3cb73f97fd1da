"""Measured peak rates of this machine, so that utilisation figures mean something."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bulkinfer.layers.linear import linear, packed


@dataclass(frozen=True)
class MatmulShape:
    rows: int  # tokens in one step
    in_features: int
    out_features: int

    @property
    def flops(self) -> int:
        return 2 * self.rows * self.in_features * self.out_features


@dataclass(frozen=True)
class MatmulPeak:
    tflops: float
    shape: MatmulShape  # the shape that reached it
    dtype: torch.dtype
    tries: int

    def report(self) -> dict:
        return {"peak_matmul_tflops": round(self.tflops, 4), "peak_dtype": str(self.dtype).removeprefix("torch."),
                "peak_shape": [self.shape.rows, self.shape.in_features, self.shape.out_features],
                "peak_tries": self.tries, "threads": torch.get_num_threads()}


def model_matmul_shapes(config, step_rows: tuple[int, ...], logit_rows: int) -> list[MatmulShape]:
    """The projections a step of ``config`` multiplies ([rows, in] x [in, out], the fused ones as the engine
    fuses them), at each of ``step_rows``; the LM head at ``logit_rows`` (a step computes logits for one token
    per sequence, not for every prompt token)."""
    hidden, attn = config.hidden_size, config.num_heads * config.head_dim
    widths = {(hidden, attn + 2 * config.num_kv_heads * config.head_dim), (attn, hidden)}
    for layer in range(config.num_layers):
        inter = config.moe.intermediate_size if config.is_sparse(layer) else config.intermediate_size
        widths |= {(hidden, 2 * inter), (inter, hidden)}
    shapes = [MatmulShape(rows, i, o) for rows in sorted(set(step_rows)) for i, o in sorted(widths)]
    return shapes + [MatmulShape(logit_rows, hidden, config.vocab_size)]


def matmul_peak(shapes: list[MatmulShape], dtype: torch.dtype, device: torch.device, tries: int = 5,
                seconds: float = 0.5, clock: Callable[[], float] = time.perf_counter) -> MatmulPeak:
    """The best rate of ``shapes`` in ``dtype`` on this process's threads: for each shape the best of ``tries``
    timings of ``seconds`` each (a try that met other load counts less), through the engine's own linear with
    the weight as the engine holds it (oneDNN, packed in bf16) and plain ``F.linear``, whichever is faster. A
    model's matmuls cannot beat it, so utilisation against it is a true fraction; a single square shape
    measured once is not that. ``clock``: wall seconds, or ``time.process_time`` for the rate per CPU second
    of this process, which other work on a shared CPU moves far less."""
    best = None
    for shape in shapes:
        x = torch.randn(shape.rows, shape.in_features, device=device).to(dtype)
        weight = torch.randn(shape.out_features, shape.in_features, device=device).to(dtype)
        for matmul, held in ((linear, packed(weight)), (F.linear, weight)):
            rate = max(_calls_per_s(lambda: matmul(x, held), device, seconds, clock) for _ in range(tries))
            if best is None or rate * shape.flops > best[0]:
                best = (rate * shape.flops, shape)
    return MatmulPeak(best[0] / 1e12, best[1], dtype, tries)


def utilisation(achieved_tflops: float, peak: float) -> dict:
    """{"mfu": fraction} of the peak; above 1 the peak was measured wrong (under other load, or on another
    shape), so {"mfu_error": ...} says so instead of a figure that is no utilisation."""
    fraction = achieved_tflops / peak
    if fraction <= 1:
        return {"mfu": round(fraction, 3)}
    return {"mfu_error": f"{fraction:.1%} of the measured matmul peak: a measurement error, not a utilisation"}


def copy_bytes_per_s(device: torch.device, size: int = 256 << 20, seconds: float = 1.0) -> float:
    """Bytes read plus bytes written per second by a copy far bigger than any cache (STREAM's
    convention): the rate that bounds a step which must read all of its weights and KV cache."""
    source = torch.ones(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return 2 * size * _calls_per_s(lambda: target.copy_(source), device, seconds)


def _calls_per_s(call, device: torch.device, seconds: float, clock: Callable[[], float] = time.perf_counter) -> float:
    call()  # warm-up
    count, start = 0, clock()
    while clock() - start < seconds:
        call()
        count += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return count / (clock() - start)


def matmul_params(config, active: bool = True) -> int:
    """Weights of every layer's projections and the LM head. In a sparse layer: the router, any
    shared expert and, if ``active``, the top-k experts a token is multiplied by (for FLOPs), else
    every expert (what a decode step of a large batch reads)."""
    attn = config.hidden_size * (config.num_heads + 2 * config.num_kv_heads) * config.head_dim
    attn += config.num_heads * config.head_dim * config.hidden_size
    if config.mla is not None:
        attn = config.mla.projection_weights
    mlps = [_mlp_params(config, layer, active) for layer in range(config.num_layers)]
    return config.num_layers * attn + sum(mlps) + config.hidden_size * config.vocab_size


def _mlp_params(config, layer: int, active: bool) -> int:
    moe = config.moe
    if not config.is_sparse(layer):
        return 3 * config.hidden_size * config.intermediate_size
    experts = moe.routing.top_k if active else moe.num_experts
    shared = 3 * moe.shared_intermediate_size + moe.shared_gated if moe.shared_intermediate_size else 0  # and a gate
    return config.hidden_size * (moe.num_experts + 3 * experts * moe.intermediate_size + shared)


def model_flops(num_params: int, num_layers: int, attn_width: int, requests, computed_prompt: int | None) -> float:
    """Matmul FLOPs: 2 per weight per token, plus attention's QK and PV products over the context.

    computed_prompt (bulkinfer's count, prefix-cache hits left out) scales the prompt's share, so
    work the cache saved is not counted as work done.
    """
    prompt_total = sum(len(r.prompt) * r.n for r in requests)
    prompt = prompt_total if computed_prompt is None else computed_prompt
    generated = sum(r.max_tokens * r.n for r in requests)
    prompt_contexts = sum(r.n * len(r.prompt) ** 2 / 2 for r in requests) * prompt / max(prompt_total, 1)
    decode_contexts = sum(r.n * (len(r.prompt) * r.max_tokens + r.max_tokens ** 2 / 2) for r in requests)
    return 2 * num_params * (prompt + generated) + 4 * num_layers * attn_width * (prompt_contexts + decode_contexts)
