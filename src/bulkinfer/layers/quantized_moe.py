"""Mixture-of-experts experts whose weights stay quantized in memory: every expert's gate/up and down
projections stacked in a quantized layout (layers/quantized_weights.py), one more leading dimension.

On a GPU the fused MoE kernel reads the quantized stacks directly, dequantizing a tile at a time
(kernels/fused_moe.py). Elsewhere, and in batch-invariant mode, each expert's weight is dequantized
into the compute dtype when the expert runs and dropped after, so only one expert's plain weight
exists at a time, and the reference's per-expert matmuls run.

gpt-oss's experts keep their biases and clamped SwiGLU (FusedExperts' ``gate_up_bias``, ``down_bias`` and
``clamped_swiglu``), which both paths take as the plain experts do.
"""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.kernels.expert_weights import ExpertWeights
from bulkinfer.kernels.fused_moe import fused_moe_ref, fused_moe_triton
from bulkinfer.layers.linear import invariant_linear, linear
from bulkinfer.layers.moe import FusedExperts, expert_variant
from bulkinfer.layers.quantized_weights import WeightFormat, add_quantized_parameters, split_dims


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


class QuantizedExperts(nn.Module):
    """FusedExperts' interface (layers/moe.py) over quantized weights: ``gate_up_proj`` [E, 2 * inter,
    hidden] (gate rows, then up rows) and ``down_proj`` [E, hidden, inter], ``inter`` this rank's share
    (its partial sums are added up by the MoE block, as FusedExperts' are); ``plain``'s biases and activation."""

    batch_invariant = False  # set by set_batch_invariant

    def __init__(self, plain: FusedExperts, fmt: WeightFormat):
        super().__init__()
        num_experts, hidden_size, intermediate_size = plain.down_proj.shape
        self.num_experts = num_experts
        self.gate_up_proj = StackedQuantizedWeight(num_experts, 2 * intermediate_size, hidden_size, fmt, split=0)
        self.down_proj = StackedQuantizedWeight(num_experts, hidden_size, intermediate_size, fmt, split=1)
        self.gate_up_bias, self.down_bias = plain.gate_up_bias, plain.down_bias
        self.clamped_swiglu = plain.clamped_swiglu

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Each token's weighted experts, without their down bias: [T, hidden]."""
        w13, w2 = self.expert_weights()
        variant = expert_variant(self)
        if x.device.type == "cuda" and not self.batch_invariant:
            return fused_moe_triton(x, w13, w2, weights, ids, **variant)
        return fused_moe_ref(x, w13.experts(x.dtype), w2.experts(x.dtype), weights, ids,
                             linear=invariant_linear if self.batch_invariant else linear, **variant)

    def expert_weights(self) -> tuple[ExpertWeights, ExpertWeights]:
        """The gate/up and down stacks as the fused MoE kernel reads them (no copy)."""
        return _as_expert_weights(self.gate_up_proj), _as_expert_weights(self.down_proj)


def _as_expert_weights(stacked: StackedQuantizedWeight) -> ExpertWeights:
    fmt = stacked.format
    if fmt.kind == "mxfp4":
        return ExpertWeights.mxfp4(stacked.blocks, stacked.scales)
    if fmt.kind == "int":
        in_features = stacked.qweight.shape[-1] * 32 // fmt.bits
        return ExpertWeights.int_weight(stacked.qweight, stacked.scales, stacked.zeros,
                                        fmt.group_size or in_features, fmt.bits)
    return ExpertWeights.fp8(stacked.weight, stacked.weight_scale, fmt.block_size)
