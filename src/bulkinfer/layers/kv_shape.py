"""The shape of one attention layer's share of the paged KV cache, which the engine sizes its pool from."""

from __future__ import annotations

from typing import NamedTuple


class KVShape(NamedTuple):
    """Per token: ``planes`` planes of ``heads`` x ``head_dim`` values. Ordinary attention caches keys and values
    (two planes); multi-head latent attention caches one row that serves as both (one plane)."""

    heads: int
    head_dim: int
    planes: int = 2

    @property
    def values_per_token(self) -> int:
        return self.planes * self.heads * self.head_dim
