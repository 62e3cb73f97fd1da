"""SiLU(gate) * up over the fused gate/up projection of a gated MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:  # x: [num_tokens, 2 * inter] -> [num_tokens, inter]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up
