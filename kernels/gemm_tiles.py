"""Tile sizes of the GEMMs that multiply rows by a weight: the fused MoE's grouped GEMM and the
quantized linear layers.

Pure functions of the shapes, dtypes and a ``KernelTarget`` (see target.py), so the compile check
can ask what each launcher picks on a GPU it does not have.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._triton import next_power_of_2
from .target import KernelTarget


@dataclass(frozen=True)
class GemmTiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


def row_tile(rows: int) -> int:
    """16 rows for decode's few, up to 64 for prefill."""
    return 16 if rows <= 16 else 32 if rows <= 64 else 64


def column_tile(block_m: int, n: int) -> int:
    """Wide column tiles under short row tiles, so a program's accumulator stays about the same size."""
    return min(128 if block_m <= 32 else 64, max(16, next_power_of_2(n)))


def spread_columns(block_n: int, n: int, row_tiles: int, target: KernelTarget) -> int:
    """Narrower column tiles (down to 32) until every multiprocessor has a program: a decode step's
    few rows are one row tile, and a GEMM whose programs leave multiprocessors idle cannot read
    the weight at the GPU's full bandwidth."""
    while block_n > 32 and row_tiles * -(-n // block_n) < target.multiprocessors:
        block_n //= 2
    return block_n


def pipeline_stages(stage_bytes: int, target: KernelTarget) -> int:
    """Up to three stages of a K step's tiles, as many as fit the target's shared memory (sm_86
    gives a program 99 KiB); the interpreter runs one."""
    return 1 if target.interpreted else max(1, min(3, target.shared_memory // stage_bytes))
