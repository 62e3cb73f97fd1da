"""Measured peak rates of this machine, so that utilisation figures mean something."""

from __future__ import annotations

import time

import torch


def matmul_tflops(dtype: torch.dtype, device: torch.device, size: int = 2048, seconds: float = 2.0) -> float:
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    return 2 * size ** 3 * _calls_per_s(lambda: a @ b, device, seconds) / 1e12


def copy_bytes_per_s(device: torch.device, size: int = 256 << 20, seconds: float = 1.0) -> float:
    """Bytes read plus bytes written per second by a copy far bigger than any cache (STREAM's
    convention): the rate that bounds a step which must read all of its weights and KV cache."""
    source = torch.ones(size, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return 2 * size * _calls_per_s(lambda: target.copy_(source), device, seconds)


def _calls_per_s(call, device: torch.device, seconds: float) -> float:
    call()  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return count / (time.perf_counter() - start)


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
