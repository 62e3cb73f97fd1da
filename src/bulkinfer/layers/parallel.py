"""Which shard of the model this process holds, and the two collectives the layers need.

With tensor parallelism each of K processes holds 1/K of the attention heads, of the MLP
columns and of the vocabulary. Column-parallel layers leave their outputs split; row-parallel
layers and the vocabulary-parallel embedding sum partial results with an all-reduce; the LM head
gathers its vocabulary slices on rank 0, the rank that samples. With K = 1 nothing communicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class TensorParallel:
    rank: int = 0
    size: int = 1

    def split(self, total: int, what: str) -> int:
        """This rank's share of `total` items that must split evenly."""
        if total % self.size:
            raise ValueError(f"the model's {what} ({total}) do not divide by tensor_parallel_size ({self.size})")
        return total // self.size

    def padded_split(self, total: int) -> int:
        """Each rank's share when the last one may hold padding (the vocabulary)."""
        return -(-total // self.size)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.size > 1:
            dist.all_reduce(x)
        return x

    def gather_last_dim(self, x: torch.Tensor) -> torch.Tensor | None:
        """[..., n] on every rank -> [..., size * n] on rank 0 and None elsewhere."""
        if self.size == 1:
            return x
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(self.size)] if self.rank == 0 else None
        dist.gather(x, parts, dst=0)
        return torch.cat(parts, dim=-1) if self.rank == 0 else None


SINGLE = TensorParallel()
