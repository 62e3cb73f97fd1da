"""Grouped LoRA shrink and expand: one batch of tokens, each through its own adapter's A and B.

Plain PyTorch: one matmul per adapter slot present in the batch, over that slot's tokens. Tokens of
the base model (slot -1) take no part.
"""

from __future__ import annotations

from torch import Tensor


def lora_shrink(x: Tensor, lora_a: Tensor, token_slots: Tensor, scale: float = 1.0) -> Tensor:
    """x [T, H], lora_a [S, R, H], token_slots [T] int64 (-1: no adapter) -> [T, R]:
    ``x[t] @ lora_a[slot[t]].T * scale``, zeros where the slot is -1."""
    y = x.new_zeros(x.shape[0], lora_a.shape[1])
    for slot, rows in _tokens_by_slot(token_slots):
        y[rows] = (x[rows] @ lora_a[slot].T) * scale
    return y


def lora_expand(y: Tensor, lora_b: Tensor, token_slots: Tensor, out: Tensor, scaling: Tensor) -> None:
    """y [T, R], lora_b [S, O, R], scaling [S] fp32; ``out`` [T, O] (a view may be a column slice) gains
    ``(y[t] @ lora_b[slot[t]].T) * scaling[slot[t]]``, untouched where the slot is -1."""
    for slot, rows in _tokens_by_slot(token_slots):
        delta = (y[rows] @ lora_b[slot].T).float() * scaling[slot]
        out[rows] += delta.to(out.dtype)


def _tokens_by_slot(token_slots: Tensor) -> list[tuple[int, Tensor]]:
    """(slot, the indices of its tokens) for every adapter slot the batch uses."""
    return [(slot, (token_slots == slot).nonzero().squeeze(1))
            for slot in token_slots.unique().tolist() if slot >= 0]
