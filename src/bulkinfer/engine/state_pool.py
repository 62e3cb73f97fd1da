"""The recurrent state pool: each running sequence's fixed-size state for every recurrent layer of a hybrid model.

Gated delta-net, Mamba2 and short-convolution layers keep a convolution window and (for the first two) a state
matrix per sequence instead of a KV cache that grows with its length. Each sequence holds one slot from admission
to its end or its preemption; there are max_num_seqs slots, so a slot's memory is set aside before the KV blocks
are counted. The engine owns the slot numbers (StateSlots); the model runner owns the tensors (StatePool).
"""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.sequence import Sequence


class StateSlots:
    """Which slots of the pool are free; a sequence's slot is ``seq.state_slot`` (-1: none)."""

    def __init__(self, num_slots: int):
        self.free = list(range(num_slots - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self.free)

    def take(self, seq: Sequence) -> None:
        seq.state_slot = self.free.pop()

    def release(self, seq: Sequence) -> None:
        if seq.state_slot >= 0:
            self.free.append(seq.state_slot)
            seq.state_slot = -1


class StatePool:
    """One tensor [num_slots, *shape] per state of each recurrent layer, bound to the layer as ``layer.states``."""

    def __init__(self, layers: list[nn.Module], num_slots: int, device: torch.device):
        self.num_slots = num_slots
        self.tensors = []
        for layer in layers:
            layer.states = [torch.zeros((num_slots, *shape), dtype=dtype, device=device)
                            for shape, dtype in layer.state_specs()]
            self.tensors.extend(layer.states)

    @staticmethod
    def bytes_per_sequence(layers: list[nn.Module]) -> int:
        """One slot over every recurrent layer: what a sequence's state costs, whatever its length."""
        return sum(torch.Size(shape).numel() * torch.tensor([], dtype=dtype).element_size()
                   for layer in layers for shape, dtype in layer.state_specs())


    @staticmethod
    def prefill_scratch_bytes(layers: list[nn.Module], tokens: int, seqs: int) -> int:
        """The most any one layer's prefill kernels allocate for a step of ``tokens`` rows in ``seqs``
        sequences: the layers run one after another, each freeing its scratch, so the largest is what a
        step needs beside its activations."""
        return max((layer.prefill_scratch_bytes(tokens, seqs) for layer in layers), default=0)


# Why a hybrid model runs without prefix caching: the one line a run summary gives.
NO_PREFIX_CACHING = ("off: a hybrid model's recurrent state after a shared prefix is not kept (only the KV cache "
                     "could be reused), so every prompt is prefilled in full")


def state_slots(pool: StatePool | None) -> StateSlots | None:
    """The scheduler's view of the pool: one slot per running sequence; None for a model without state."""
    return None if pool is None else StateSlots(pool.num_slots)


def prefix_caching_off(options: EngineConfig, pool: StatePool | None) -> str:
    """Why prefix caching is off although asked for; "" when it runs as asked."""
    return NO_PREFIX_CACHING if pool is not None and options.enable_prefix_caching else ""
