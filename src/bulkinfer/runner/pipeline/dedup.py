"""A stage's `dedup`: drop each row whose embedding's cosine similarity to an earlier kept row's exceeds
a threshold, after an embed stage.

    dedup = {column = "embedding", threshold = 0.95}

Rows are compared a block at a time against the kept rows, a block of those at a time, so the memory
beyond the kept embeddings themselves is one block-by-block matrix of similarities, however many rows
there are: dedup holds the kept rows' embeddings (which grow with the rows kept, as any exact dedup's
must), never the rows. Which rows are kept does not depend on the block size: a row is compared with
every kept row before it, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from bulkinfer.errors import UsageError
from bulkinfer.runner.pipeline.transforms import ERROR, Batches, Row, is_sound

BLOCK_ROWS = 1024


@dataclass(frozen=True)
class Dedup:
    column: str = "embedding"
    threshold: float = 0.95

    @classmethod
    def from_table(cls, table: Any) -> Dedup:
        if not isinstance(table, dict) or set(table) - {"column", "threshold"}:
            raise UsageError("dedup must be a table {column = \"embedding\", threshold = 0.95}")
        dedup = cls(**table)
        if not isinstance(dedup.column, str) or isinstance(dedup.threshold, bool) or not isinstance(
                dedup.threshold, (int, float)) or not -1.0 <= dedup.threshold <= 1.0:
            raise UsageError(f"dedup: column must be a string and threshold a number in [-1, 1], got {table}")
        return dedup


def dedup(batches: Iterable[list[Row]], rule: Dedup, block_rows: int = BLOCK_ROWS) -> Batches:
    """The rows without near-duplicates of earlier kept rows; a sound row with no embedding becomes an error row."""
    kept_vectors: list[np.ndarray] = []  # unit vectors of the kept rows, a block per array
    for batch in batches:
        out: list[Row] = []
        for start in range(0, len(batch), block_rows):
            out.extend(_dedup_block(batch[start:start + block_rows], rule, kept_vectors))
        yield out


def _dedup_block(block: list[Row], rule: Dedup, kept_vectors: list[np.ndarray]) -> list[Row]:
    """The block's rows that are kept; their vectors are added to `kept_vectors`."""
    vectors = {at: _unit(row.get(rule.column)) for at, row in enumerate(block) if is_sound(row)}
    keep = _new_in_block({at: v for at, v in vectors.items() if v is not None}, kept_vectors, rule.threshold)
    if keep:
        kept_vectors.append(np.stack([vectors[at] for at in keep]))
    kept_here = set(keep)
    out: list[Row] = []
    for at, row in enumerate(block):
        if not is_sound(row) or at in kept_here:
            out.append(row)
        elif vectors[at] is None:
            out.append({**row, ERROR: f"dedup: no embedding in column {rule.column!r}"})
    return out


def _new_in_block(vectors: dict[int, np.ndarray], kept: list[np.ndarray], threshold: float) -> list[int]:
    """The block's rows (by position) that are not within `threshold` of a kept row or an earlier new one."""
    if not vectors:
        return []
    positions = list(vectors)
    block = np.stack([vectors[at] for at in positions])  # [B, D]
    duplicate = np.zeros(len(positions), dtype=bool)
    for earlier in kept:  # [K, D]: one similarity matrix [B, K] at a time
        duplicate |= (block @ earlier.T > threshold).any(axis=1)
    within = block @ block.T  # [B, B]: against the block's own earlier rows, in order
    new: list[int] = []
    for i in range(len(positions)):
        if not duplicate[i] and not any(within[i, j] > threshold for j in new):
            new.append(i)
    return [positions[i] for i in new]


def _unit(value: Any) -> np.ndarray | None:
    if not isinstance(value, (list, tuple)) or not value:
        return None
    vector = np.asarray(value, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else None
