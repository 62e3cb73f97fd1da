"""RMSNorm that can fuse the residual add before it."""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.layers.ops import KernelOps


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, ops: KernelOps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.ops = ops

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        """Without residual: the normed x. With one: (normed x + residual, x + residual)."""
        out, new_residual = self.ops.rms_norm(x, self.weight, self.eps, residual)
        return out if residual is None else (out, new_residual)
