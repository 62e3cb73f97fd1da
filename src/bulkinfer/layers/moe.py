"""The mixture-of-experts MLP: a router picks each token's top-k experts, whose MLPs run grouped by expert.

Every expert's gate/up and down projections are stacked into two 3-D parameters, so one call of
``KernelOps.fused_moe`` runs all of them (a grouped GEMM per projection on a GPU; one matmul per
expert over its own tokens on the CPU).

Under tensor parallelism every rank holds every expert, each with 1/K of its MLP columns (the
same split as a dense MLP): gate/up rows and down columns. Each rank computes a partial sum over
its columns for every routed token and one all-reduce adds them up, so no rank waits for another's
experts and the load is even however the router picks. The router and Qwen2-MoE's shared-expert
gate are replicated.

gpt-oss's experts have biases and their own activation (a clamped SwiGLU): the gate/up bias goes
into each expert's first matmul, the down bias, whole on every rank, is added once after the sum
(weighted as its expert's output is).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.kernels.fused_moe import fused_moe_ref
from bulkinfer.layers.linear import Linear, invariant_linear
from bulkinfer.layers.mlp import MLP
from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import TensorParallel

EXPERT_COLUMNS, SHARED_COLUMNS = "expert MLP columns (moe_intermediate_size)", "shared expert MLP columns"


@dataclass(frozen=True)
class SigmoidRouting:
    """LFM2-MoE's router: an independent sigmoid score per expert, a learned bias per expert (``score_bias``)
    that sways which experts are chosen but not their weights, and the chosen scores renormalized (1e-6 added
    to their sum) and multiplied by ``scaling_factor``."""

    score_bias: bool
    scaling_factor: float


def route(logits: torch.Tensor, top_k: int, normalize: bool, sigmoid: SigmoidRouting | None = None,
          score_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [T, E] -> (weights [T, top_k] fp32, expert ids [T, top_k]): the top-k of a softmax
    over the experts in fp32, renormalized to sum to 1 if ``normalize``; or ``sigmoid``'s routing."""
    if sigmoid is not None:
        return _sigmoid_route(logits, top_k, normalize, sigmoid.scaling_factor, score_bias)
    weights, ids = torch.softmax(logits.float(), dim=-1).topk(top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def _sigmoid_route(logits: torch.Tensor, top_k: int, normalize: bool, scaling_factor: float,
                   score_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    scores = logits.float().sigmoid()
    ids = (scores if score_bias is None else scores + score_bias).topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if normalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-6)
    return weights * scaling_factor, ids


class FusedExperts(nn.Module):
    """Every expert's gated MLP, stacked: ``gate_up_proj`` [E, 2 * inter, hidden] (gate rows, then up
    rows) and ``down_proj`` [E, hidden, inter], inter being this rank's share of the columns; with
    ``bias``, ``gate_up_bias`` [E, 2 * inter] and ``down_bias`` [E, hidden] (whole on every rank).

    ``tp_dim`` is the dimension of one expert's checkpoint tensor that ranks split, as for a linear layer.
    """

    batch_invariant = False  # set by set_batch_invariant: a row's result must not depend on the others

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, ops: KernelOps,
                 tp: TensorParallel, bias: bool = False, clamped_swiglu: tuple[float, float] | None = None):
        super().__init__()
        inter = tp.split(intermediate_size, EXPERT_COLUMNS)
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * inter, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, inter))
        self.gate_up_proj.tp_dim, self.down_proj.tp_dim = 0, 1
        self.gate_up_bias = self.down_bias = None
        if bias:
            self.gate_up_bias = nn.Parameter(torch.empty(num_experts, 2 * inter))
            self.down_bias = nn.Parameter(torch.empty(num_experts, hidden_size))
            self.gate_up_bias.tp_dim = 0
        self.clamped_swiglu = clamped_swiglu
        self.ops = ops

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """This rank's partial sum of each token's weighted experts, without their down bias: [T, hidden]."""
        variant = {}
        if self.gate_up_bias is not None or self.clamped_swiglu is not None:
            variant = {"w13_bias": self.gate_up_bias, "clamped_swiglu": self.clamped_swiglu}
        if self.batch_invariant:  # the reference's per-expert matmuls, each with one tiling for any row count
            return fused_moe_ref(x, self.gate_up_proj, self.down_proj, weights, ids, linear=invariant_linear,
                                 **variant)
        return self.ops.fused_moe(x, self.gate_up_proj, self.down_proj, weights, ids, **variant)

    def weighted_down_bias(self, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Each token's experts' down biases, weighted by its router weights: [T, hidden]."""
        return (weights[..., None] * self.down_bias[ids].float()).sum(1)


class SparseMoeBlock(nn.Module):
    """Routed experts, plus Qwen2-MoE's shared expert (every token, scaled by a sigmoid gate) when
    ``shared_intermediate_size`` is not 0. With ``bias`` the router and the experts have biases (gpt-oss);
    ``sigmoid_routing`` replaces the softmax router (LFM2-MoE)."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, intermediate_size: int, normalize: bool,
                 shared_intermediate_size: int, ops: KernelOps, tp: TensorParallel, bias: bool = False,
                 clamped_swiglu: tuple[float, float] | None = None, sigmoid_routing: SigmoidRouting | None = None):
        super().__init__()
        self.gate = Linear(hidden_size, num_experts, bias=bias)  # the router
        self.top_k, self.normalize, self.sigmoid_routing = top_k, normalize, sigmoid_routing
        self.score_bias = None
        if sigmoid_routing is not None and sigmoid_routing.score_bias:  # fp32, as the router adds it
            self.score_bias = nn.Parameter(torch.empty(num_experts, dtype=torch.float32))
        self.experts = FusedExperts(num_experts, hidden_size, intermediate_size, ops, tp, bias, clamped_swiglu)
        self.expert_bias = bias  # the experts may be swapped for quantized ones (layers/quantize.py), which have none
        self.shared_expert = self.shared_expert_gate = None
        if shared_intermediate_size:
            self.shared_expert = MLP(hidden_size, shared_intermediate_size, ops, tp, SHARED_COLUMNS)
            self.shared_expert_gate = Linear(hidden_size, 1, bias=False)
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        weights, ids = route(self.gate(x), self.top_k, self.normalize, self.sigmoid_routing, self.score_bias)
        out = self.tp.all_reduce(self.experts(x, weights, ids))
        if self.expert_bias:
            out = out + self.experts.weighted_down_bias(weights, ids).to(out.dtype)
        if self.shared_expert is not None:
            out = out + _row_sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out


def _row_sigmoid(gate: torch.Tensor) -> torch.Tensor:
    """Sigmoid of one value per token [T, 1], the same for a token whatever T is.

    CPU kernels send a tensor's last elements (past its last whole vector) through a scalar loop
    that rounds differently, so which tokens land there would follow T: padded to whole vectors,
    every value goes through the vector loop.
    """
    padded = F.pad(gate.view(-1), (0, -gate.shape[0] % 64))
    return torch.sigmoid(padded)[:gate.shape[0], None]
