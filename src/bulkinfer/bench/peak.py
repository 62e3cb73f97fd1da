"""Measured peak rates of this machine, so that utilisation figures mean something."""

from __future__ import annotations

import time

import torch


def matmul_tflops(dtype: torch.dtype, device: torch.device, size: int = 2048, seconds: float = 2.0) -> float:
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    a @ b  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return 2 * size ** 3 * count / (time.perf_counter() - start) / 1e12


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
