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
    """Matmul FLOPs: 2 per weight per token, plus attention's QK and PV products over the context."""
    prompt = sum(len(r.prompt) * r.n for r in requests) if computed_prompt is None else computed_prompt
    tokens = prompt + sum(r.max_tokens * r.n for r in requests)
    contexts = sum(r.n * (len(r.prompt) + r.max_tokens) ** 2 / 2 for r in requests)
    return 2 * num_params * tokens + 4 * num_layers * attn_width * contexts
