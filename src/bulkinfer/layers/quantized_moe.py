"""Mixture-of-experts experts whose weights stay quantized in memory: every expert's gate/up and down
projections stacked in a quantized layout (layers/quantized_weights.py), one more leading dimension.

Each expert's weight is dequantized into the compute dtype when the expert runs and dropped after,
so only one expert's plain weight exists at a time; the matmuls are the reference's, grouped by
expert (kernels/fused_moe.py). This runs on every device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from bulkinfer.kernels.fused_moe import fused_moe_ref
from bulkinfer.layers.linear import invariant_linear, linear
from bulkinfer.layers.quantized_weights import WeightFormat, add_quantized_parameters, dequantize, split_dims


class StackedQuantizedWeight(nn.Module):
    """``num_experts`` quantized weights [out, in], parameters named as a QuantizedLinear's."""

    def __init__(self, num_experts: int, out_features: int, in_features: int, fmt: WeightFormat, split: int):
        """``split``: which dimension of one expert's weight ranks split (0: gate/up rows, 1: down columns)."""
        super().__init__()
        if fmt.act_order:
            raise ValueError("act-order (a permutation of each expert's inputs) is not supported for experts")
        self.format = fmt
        add_quantized_parameters(self, fmt, out_features, in_features, leading=(num_experts,))
        split_dims(self, fmt, split)


class _Dequantized(Sequence):
    """Expert e's plain weight, made when fused_moe_ref asks for it."""

    def __init__(self, stacked: StackedQuantizedWeight, num_experts: int, dtype: torch.dtype):
        self.stacked, self.num_experts, self.dtype = stacked, num_experts, dtype

    def __len__(self) -> int:
        return self.num_experts

    def __getitem__(self, expert: int) -> torch.Tensor:
        return dequantize(self.stacked, self.stacked.format, self.dtype, expert)


class QuantizedExperts(nn.Module):
    """FusedExperts' interface (layers/moe.py) over quantized weights: ``gate_up_proj`` [E, 2 * inter,
    hidden] (gate rows, then up rows) and ``down_proj`` [E, hidden, inter], ``inter`` this rank's share
    (its partial sums are added up by the MoE block, as FusedExperts' are)."""

    batch_invariant = False  # set by set_batch_invariant

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, fmt: WeightFormat):
        super().__init__()
        self.num_experts = num_experts
        self.gate_up_proj = StackedQuantizedWeight(num_experts, 2 * intermediate_size, hidden_size, fmt, split=0)
        self.down_proj = StackedQuantizedWeight(num_experts, hidden_size, intermediate_size, fmt, split=1)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Each token's weighted experts: [T, hidden]."""
        w13 = _Dequantized(self.gate_up_proj, self.num_experts, x.dtype)
        w2 = _Dequantized(self.down_proj, self.num_experts, x.dtype)
        return fused_moe_ref(x, w13, w2, weights, ids, linear=invariant_linear if self.batch_invariant else linear)
