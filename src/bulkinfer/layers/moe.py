"""The mixture-of-experts MLP: a router picks each token's top-k experts, whose MLPs run grouped by expert.

Every expert's gate/up and down projections are stacked into two 3-D parameters, so one call of
``KernelOps.fused_moe`` runs all of them (a grouped GEMM per projection on a GPU; one matmul per
expert over its own tokens on the CPU).

The router scores the experts and picks each token's (``Routing``): a softmax over them, or DeepSeek-V3's
sigmoid of each; optionally only within the best few groups of experts (DeepSeek's ``n_group``/``topk_group``);
the chosen weights renormalized and scaled. DeepSeek-V3 adds a learned per-expert bias to the scores when it
chooses, and weighs the chosen experts by their unbiased scores.

Under tensor parallelism every rank holds every expert, each with 1/K of its MLP columns (the
same split as a dense MLP): gate/up rows and down columns. Each rank computes a partial sum over
its columns for every routed token and one all-reduce adds them up, so no rank waits for another's
experts and the load is even however the router picks. The router (with DeepSeek-V3's correction
bias) and Qwen2-MoE's shared-expert gate are replicated; a shared expert splits as a dense MLP does.

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
class Routing:
    """How router logits choose each token's experts and weigh them (the names are DeepSeek's config keys')."""

    top_k: int
    normalize: bool  # norm_topk_prob: the chosen experts' weights renormalized to sum to 1
    scoring: str = "softmax"  # scoring_func: "softmax" over the experts, or "sigmoid" of each one
    # topk_method: "greedy"; "group_limited_greedy" (groups ranked by their best expert); "noaux_tc" (scores
    # biased by e_score_correction_bias to choose, groups ranked by the sum of their best two)
    method: str = "greedy"
    num_groups: int = 1  # n_group: the experts in this many equal groups; 1: no groups
    top_groups: int = 1  # topk_group: experts are chosen from this many best groups only
    scaling: float = 1.0  # routed_scaling_factor: multiplies the chosen experts' weights

    @property
    def correction_bias(self) -> bool:
        return self.method == "noaux_tc"


SCORING_FUNCS, TOPK_METHODS = ("softmax", "sigmoid"), ("greedy", "group_limited_greedy", "noaux_tc")


def route(logits: torch.Tensor, routing: Routing,
          correction_bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [T, E] -> (weights [T, top_k] fp32, expert ids [T, top_k]). ``correction_bias`` [E]
    (``noaux_tc``) is added to the scores to choose the experts, not to their weights."""
    logits = logits.float()
    scores = torch.softmax(logits, dim=-1) if routing.scoring == "softmax" else _invariant_sigmoid(logits)
    choice = scores if correction_bias is None else scores + correction_bias.float()
    if routing.num_groups > 1:
        choice = _within_best_groups(choice, routing)
    ids = choice.topk(routing.top_k, dim=-1).indices
    weights = scores.gather(-1, ids)
    if routing.normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * routing.scaling, ids


def _within_best_groups(choice: torch.Tensor, routing: Routing) -> torch.Tensor:
    """``choice`` [T, E] with every expert outside each token's ``top_groups`` best groups at -inf."""
    groups = choice.unflatten(-1, (routing.num_groups, -1))  # [T, groups, experts per group]
    if routing.method == "noaux_tc":
        group_scores = groups.topk(2, dim=-1).values.sum(dim=-1)
    else:
        group_scores = groups.amax(dim=-1)
    best = group_scores.topk(routing.top_groups, dim=-1).indices
    kept = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(-1, best, True)
    return groups.masked_fill(~kept[..., None], float("-inf")).flatten(-2)


class Router(Linear):
    """The router's logits [T, E] (replicated on every rank), and the experts they choose. With ``noaux_tc``
    it holds DeepSeek-V3's ``e_score_correction_bias`` [E] in fp32, as the checkpoint does."""

    def __init__(self, hidden_size: int, num_experts: int, routing: Routing, bias: bool):
        super().__init__(hidden_size, num_experts, bias=bias)
        self.routing = routing
        self.e_score_correction_bias = None
        if routing.correction_bias:
            self.e_score_correction_bias = nn.Parameter(torch.empty(num_experts, dtype=torch.float32))

    def choose(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[T, hidden] -> (weights [T, top_k] fp32, expert ids [T, top_k])."""
        return route(self(x), self.routing, self.e_score_correction_bias)


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
        variant = expert_variant(self)
        if self.batch_invariant:  # the reference's per-expert matmuls, each with one tiling for any row count
            return fused_moe_ref(x, self.gate_up_proj, self.down_proj, weights, ids, linear=invariant_linear,
                                 **variant)
        return self.ops.fused_moe(x, self.gate_up_proj, self.down_proj, weights, ids, **variant)


def expert_variant(experts: nn.Module) -> dict:
    """The fused MoE's ``w13_bias`` and ``clamped_swiglu`` for gpt-oss's experts, plain or quantized; {} for others."""
    if experts.gate_up_bias is None and experts.clamped_swiglu is None:
        return {}
    return {"w13_bias": experts.gate_up_bias, "clamped_swiglu": experts.clamped_swiglu}


def weighted_down_bias(down_bias: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each token's experts' down biases ([E, hidden]), weighted by its router weights: [T, hidden]."""
    return (weights[..., None] * down_bias[ids].float()).sum(1)


class SparseMoeBlock(nn.Module):
    """Routed experts, plus a shared expert that every token runs when ``shared_intermediate_size`` is not 0:
    scaled by a sigmoid gate with ``shared_gated`` (Qwen2-MoE), added as is without (DeepSeek's shared experts,
    one MLP as wide as all of them; Granite's shared MLP). With ``bias`` the router and the experts have biases
    (gpt-oss)."""

    def __init__(self, hidden_size: int, num_experts: int, intermediate_size: int, routing: Routing,
                 ops: KernelOps, tp: TensorParallel, shared_intermediate_size: int = 0, shared_gated: bool = True,
                 bias: bool = False, clamped_swiglu: tuple[float, float] | None = None):
        super().__init__()
        self.gate = Router(hidden_size, num_experts, routing, bias)
        self.experts = FusedExperts(num_experts, hidden_size, intermediate_size, ops, tp, bias, clamped_swiglu)
        self.shared_expert = self.shared_expert_gate = None
        if shared_intermediate_size:
            self.shared_expert = MLP(hidden_size, shared_intermediate_size, ops, tp, SHARED_COLUMNS)
        if shared_intermediate_size and shared_gated:
            self.shared_expert_gate = Linear(hidden_size, 1, bias=False)
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        weights, ids = self.gate.choose(x)
        out = self.tp.all_reduce(self.experts(x, weights, ids))
        if self.experts.down_bias is not None:
            out = out + weighted_down_bias(self.experts.down_bias, weights, ids).to(out.dtype)
        if self.shared_expert_gate is not None:
            out = out + _invariant_sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        elif self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out


def _invariant_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """Sigmoid of every element, each the same whatever the tensor's size (per-token gates [T, 1], V3's scores).

    CPU kernels send a tensor's last elements (past its last whole vector) through a scalar loop
    that rounds differently, so which tokens land there would follow T: padded to whole vectors,
    every value goes through the vector loop.
    """
    flat = x.reshape(-1)
    padded = F.pad(flat, (0, -flat.numel() % 64))
    return torch.sigmoid(padded)[:flat.numel()].view_as(x)
