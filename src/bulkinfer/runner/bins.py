"""The order in which a window's requests reach the engine: by power-of-two length bin, with shared
prefixes side by side.

Rows of similar length finish at similar times, so the running batch turns over evenly; rows that share
a prefix (a system prompt, few-shot examples) run close together, while their prefix blocks are still in
the engine's prefix cache. Output order is restored by export, so this order is free.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

Item = TypeVar("Item")


def length_bin(num_tokens: int) -> int:
    """Power-of-two bins: 1, 2-3, 4-7, ..., 512-1023, ...; coarse enough to keep prefix groups whole."""
    return num_tokens.bit_length()


def order_for_engine(items: Sequence[Item], tokens_of: Callable[[Item], list[int]]) -> list[Item]:
    # Within a bin, sorting the token lists themselves puts every group with a common prefix together,
    # whatever that prefix's length.
    return sorted(items, key=lambda item: (length_bin(len(tokens_of(item))), tokens_of(item)))
