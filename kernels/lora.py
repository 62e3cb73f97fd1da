"""Grouped LoRA shrink and expand: one batch of tokens, each through its own adapter's A and B.

Plain PyTorch: every token's A (or B) is gathered from the stacked slots and the batch runs as one
batched matmul. Tokens of the base model (slot -1) read slot 0's weights and are masked out.
"""

from __future__ import annotations

import torch
from torch import Tensor


def lora_shrink(x: Tensor, lora_a: Tensor, token_slots: Tensor, scale: float = 1.0) -> Tensor:
    """x [T, H], lora_a [S, R, H], token_slots [T] int64 (-1: no adapter) -> [T, R]:
    ``x[t] @ lora_a[slot[t]].T * scale``, zeros where the slot is -1."""
    used = token_slots >= 0
    a = lora_a[token_slots.clamp(min=0)]  # [T, R, H]
    y = torch.bmm(a, x.unsqueeze(-1)).squeeze(-1) * scale  # [T, R]
    return y * used.unsqueeze(-1).to(y.dtype)


def lora_expand(y: Tensor, lora_b: Tensor, token_slots: Tensor, out: Tensor, scaling: Tensor) -> None:
    """y [T, R], lora_b [S, O, R], scaling [S] fp32; ``out`` [T, O] (a view may be a column slice) gains
    ``(y[t] @ lora_b[slot[t]].T) * scaling[slot[t]]``, untouched where the slot is -1."""
    slots = token_slots.clamp(min=0)
    b = lora_b[slots]  # [T, O, R]
    delta = torch.bmm(b, y.unsqueeze(-1)).squeeze(-1)  # [T, O]
    weight = torch.where(token_slots >= 0, scaling[slots], torch.zeros_like(scaling[slots]))
    out += (delta * weight.unsqueeze(-1)).to(out.dtype)
