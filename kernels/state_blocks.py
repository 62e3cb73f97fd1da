"""Blocks of sequences for the CPU decode updates of recurrent state pools.

A decode update gathers its sequences' states from the pool, updates them and scatters them back.
Gathered whole, a large model's states are hundreds of MB per layer (64 sequences of Qwen3-Next:
134 MB), and each step's fresh buffer of that size is faulted in page by page: slower than going
sequence by sequence. In blocks of at most 8 MiB of state, each block's buffer is reused from step to
step by the allocator, and each block is still one batched call.
"""

from __future__ import annotations

BLOCK_BYTES = 8 << 20


def state_blocks(count: int, bytes_per_sequence: int) -> list[slice]:
    """Consecutive slices of ``count`` sequences, each holding at most ``BLOCK_BYTES`` of state (at least one)."""
    per_block = max(1, BLOCK_BYTES // max(1, bytes_per_sequence))
    return [slice(start, min(start + per_block, count)) for start in range(0, count, per_block)]
