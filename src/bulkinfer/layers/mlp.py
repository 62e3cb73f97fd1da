"""The gated SiLU MLP of every decoder here: a dense layer's MLP, and Qwen2-MoE's shared expert."""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.layers.linear import ColumnParallelLinear, RowParallelLinear
from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import TensorParallel


class MLP(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with gate and up fused into one projection.

    ``what`` names the columns in the error raised when they do not split over the ranks.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, ops: KernelOps, tp: TensorParallel, what: str):
        super().__init__()
        # This rank's gate rows then its up rows, so silu_and_mul's halves still pair up.
        self.gate_up_proj = ColumnParallelLinear(hidden_size, 2 * intermediate_size, tp, what)
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, tp, what)
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.ops.silu_and_mul(self.gate_up_proj(x)))
