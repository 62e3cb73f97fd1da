"""The CPU path of the mixture-of-experts MLP: each expert's matmuls on oneDNN, its weights packed once.

Given a plain weight, oneDNN copies it into its blocked layout on every call. A dense layer's
matmul amortizes that over all of a step's rows; an expert gets a fraction of them, and a step
calls every expert. Packed once, one expert's gate/up matmul (512 -> 1,408 columns, one CPU
core, weights not in cache) took 90 instead of 189 us for 2 rows, 169 instead of 268 us for 16
and 472 instead of 552 us for 64, with equal results (a single row takes a matrix-vector kernel
instead, and differs by float rounding).

In bf16, ``pack_expert_weights`` packs every stack once after loading and puts the per-expert packed
weights in place of the stack, so the experts' memory stays the same. Elsewhere (fp32, whose results
stay exactly as they were) the packed copies sit beside the stack and double the experts' memory.
They are made at the first forward pass, and again once the parameter is changed in place or given
new data (writes through ``.data``, as the loader's before any forward pass, are not seen).
"""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.kernels.fused_moe import fused_moe_ref
from bulkinfer.layers.linear import linear, onednn_linear, runs_on_onednn


def fused_moe_cpu(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, **variant) -> torch.Tensor:
    """``fused_moe_ref`` with each expert's matmuls on oneDNN, through packed weights where it runs;
    ``variant``: the reference's ``w13_bias`` and ``clamped_swiglu``."""
    if not runs_on_onednn(x):
        return fused_moe_ref(x, w13, w2, topk_weights, topk_ids, linear=linear, **variant)
    return fused_moe_ref(x, packed_experts(w13), packed_experts(w2), topk_weights, topk_ids, linear=onednn_linear,
                         **variant)


def pack_expert_weights(model: nn.Module) -> int:
    """Each CPU bf16 stack of experts' weights in ``model`` (``gate_up_proj``, ``down_proj``) replaced by
    its experts' weights in oneDNN's layout; returns how many stacks were packed."""
    packed = 0
    for module in model.modules():
        for name in ("gate_up_proj", "down_proj"):
            stacked = module._parameters.get(name)
            if stacked is not None and stacked.dim() == 3 and _onednn_bf16(stacked):
                experts = [nn.Parameter(weight, requires_grad=False) for weight in packed_experts(stacked)]
                del module._parameters[name]
                setattr(module, name, nn.ParameterList(experts))
                packed += 1
    return packed


def _onednn_bf16(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.bfloat16 and runs_on_onednn(weight[0])


def packed_experts(stacked: torch.Tensor | nn.ParameterList) -> list[torch.Tensor] | nn.ParameterList:
    """Each expert's weight of ``stacked`` [E, out, in] in oneDNN's layout, made once per version of it
    (a stack that ``pack_expert_weights`` replaced is its packed experts already)."""
    if isinstance(stacked, nn.ParameterList):
        return stacked
    key = (stacked.data_ptr(), stacked._version, stacked.dtype)
    cached = getattr(stacked, "_onednn_experts", None)
    if cached is None or cached[0] != key:
        cached = key, [torch.ops.mkldnn._reorder_linear_weight(weight, None) for weight in stacked.detach()]
        stacked._onednn_experts = cached
    return cached[1]
