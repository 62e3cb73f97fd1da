"""A linear layer with LoRA adapters on it, one adapter per token, for a batch that mixes adapters.

The layer keeps its base weights and holds every adapter slot's A and B stacked ([slots, rank, in] and
[slots, out, rank]), so a batch whose rows use different adapters (or none) runs each projection as
one base matmul plus one grouped shrink and one grouped expand per target. A fused projection (q, k
and v in one matrix) carries one target per part of its output, each adding into its own columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bulkinfer.kernels.lora import LoRABatch, lora_expand, lora_shrink, token_groups


@dataclass
class StepLoRASlots:
    """Which adapter slot each of the step's tokens uses, shared by every LoRA layer of one model."""

    # Each token's slot (-1: the base model), grouped once per step for every layer; None: no adapter this step.
    token_slots: LoRABatch | None = None

    def begin_step(self, token_slots: torch.Tensor | None) -> None:
        """The step's [num_tokens] int64 slots (-1: base), or None when no token uses an adapter."""
        self.token_slots = None if token_slots is None else token_groups(token_slots)


class LoRATarget:
    """One adapted projection inside a layer's output: columns [start, start + size), with the slots'
    A [slots, rank, in], B [slots, size, rank] and scaling [slots] (alpha / r, or alpha / sqrt(r))."""

    def __init__(self, in_features: int, start: int, size: int, max_loras: int, max_rank: int,
                 dtype: torch.dtype, device: torch.device):
        self.start, self.size = start, size
        self.lora_a = torch.zeros(max_loras, max_rank, in_features, dtype=dtype, device=device)
        self.lora_b = torch.zeros(max_loras, size, max_rank, dtype=dtype, device=device)
        self.scaling = torch.zeros(max_loras, dtype=torch.float32, device=device)

    def write(self, slot: int, a: torch.Tensor | None, b: torch.Tensor | None, scaling: float) -> None:
        """Put one adapter's A [rank, in] and B [size, rank] in ``slot``, zero-padded to the slots' rank;
        None: the adapter leaves this projection alone."""
        self.lora_a[slot].zero_()
        self.lora_b[slot].zero_()
        self.scaling[slot] = 0.0 if a is None else scaling
        if a is not None:
            rank = a.shape[0]
            self.lora_a[slot, :rank].copy_(a)
            self.lora_b[slot, :, :rank].copy_(b)


class LoRALinear(nn.Module):
    """``base(x)`` plus each token's adapter on each target. ``base`` is any linear layer (plain or
    quantized) whose output is not summed across ranks: LoRA runs without tensor parallelism."""

    def __init__(self, base: nn.Module, targets: dict[str, LoRATarget], batch: StepLoRASlots):
        super().__init__()
        self.base = base
        self.targets = targets  # checkpoint projection name (q_proj, ...) -> its place in the output
        self.batch = batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        slots = self.batch.token_slots
        if slots is None:
            return out
        flat, flat_out = x.reshape(-1, x.shape[-1]), out.view(-1, out.shape[-1])  # [T, in], [T, out]
        for target in self.targets.values():
            shrunk = lora_shrink(flat, target.lora_a, slots)
            lora_expand(shrunk, target.lora_b, slots, flat_out[:, target.start:target.start + target.size],
                        target.scaling)
        return out
