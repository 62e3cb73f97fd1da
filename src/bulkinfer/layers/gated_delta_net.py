"""The gated delta-net token mixer of Qwen3-Next and Qwen3.5 (their linear-attention layers): a causal convolution
over q, k and v, then the gated delta rule, whose fixed-size state per sequence lives in the engine's state pool.

Decoding sequences advance with one batched call per kernel; prefilling ones (first or later chunks) go through
the prefill kernels, which continue from the pool where ``has_initial_state`` says so (layers/step_conv.py splits
the convolution so). The layer owns no state of its own: ``states`` (conv windows [S, C, K-1], delta states
[S, Hv, Dk, Dv] fp32) is bound by the model runner.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.kernels.gated_delta_rule import (chunk_gated_delta_rule, chunk_scratch_bytes,
                                               fused_recurrent_gated_delta_rule_update)
from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.step_conv import causal_conv1d_step


@dataclass(frozen=True)
class GatedDeltaNetShape:
    hidden_size: int
    num_key_heads: int
    num_value_heads: int  # a multiple of num_key_heads: each q/k head serves that many value heads
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    rms_norm_eps: float
    # Qwen3-Next's in_proj_qkvz/in_proj_ba, grouped by key head; else Qwen3.5's in_proj_qkv/_z/_b/_a.
    grouped_projections: bool


class GatedDeltaNet(nn.Module):
    def __init__(self, shape: GatedDeltaNetShape):
        super().__init__()
        self.shape = shape
        self.key_dim = shape.num_key_heads * shape.key_head_dim
        self.value_dim = shape.num_value_heads * shape.value_head_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        hidden, heads = shape.hidden_size, shape.num_value_heads
        if shape.grouped_projections:
            self.in_proj_qkvz = nn.Linear(hidden, self.conv_dim + self.value_dim, bias=False)
            self.in_proj_ba = nn.Linear(hidden, 2 * heads, bias=False)
        else:
            self.in_proj_qkv = nn.Linear(hidden, self.conv_dim, bias=False)
            self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
            self.in_proj_b = nn.Linear(hidden, heads, bias=False)
            self.in_proj_a = nn.Linear(hidden, heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, shape.conv_kernel, groups=self.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.norm = GatedRMSNorm(shape.value_head_dim, shape.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)
        self.scale = shape.key_head_dim ** -0.5
        self.states: list[torch.Tensor] = []  # bound by the model runner: [conv windows, delta states]

    def state_specs(self) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """Per sequence: the convolution's last K-1 inputs, and the delta rule's state in fp32."""
        shape = self.shape
        return [((self.conv_dim, shape.conv_kernel - 1), self.conv1d.weight.dtype),
                ((shape.num_value_heads, shape.key_head_dim, shape.value_head_dim), torch.float32)]

    def prefill_scratch_bytes(self, tokens: int, seqs: int) -> int:
        """What the chunked Triton prefill of ``tokens`` rows in ``seqs`` sequences allocates (freed after it)."""
        shape = self.shape
        return chunk_scratch_bytes(tokens, seqs, shape.num_value_heads, shape.key_head_dim, shape.value_head_dim,
                                   self.out_proj.weight.dtype)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        qkv, z, b, a = self._project(x)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())  # log decay [T, Hv]
        batch, (conv_states, delta_states) = attn.recurrent, self.states
        mixed = causal_conv1d_step(qkv, self.conv1d.weight[:, 0], None, conv_states, batch, activation="silu")
        out = qkv.new_empty(x.shape[0], self.shape.num_value_heads, self.shape.value_head_dim)
        if batch.decode_rows.numel():
            rows, slots = batch.decode_rows, batch.decode_slots
            out[rows] = fused_recurrent_gated_delta_rule_update(*self._heads(mixed[rows]), g[rows], beta[rows],
                                                                delta_states, slots, self.scale)
        if batch.prefill_rows.numel():
            rows, slots = batch.prefill_rows, batch.prefill_slots
            starts, continuing = batch.prefill_query_start_loc, batch.prefill_has_initial_state
            out[rows] = chunk_gated_delta_rule(*self._heads(mixed[rows]), g[rows], beta[rows], delta_states, slots,
                                               starts, continuing, self.scale)
        return self.out_proj(self.norm(out, z).reshape(x.shape[0], self.value_dim))

    def _project(self, x: torch.Tensor):
        """qkv [T, 2 key_dim + value_dim] (q, then k, then v), z [T, Hv, Dv], b and a [T, Hv]."""
        shape, tokens = self.shape, x.shape[0]
        if not shape.grouped_projections:
            z = self.in_proj_z(x).view(tokens, shape.num_value_heads, shape.value_head_dim)
            return self.in_proj_qkv(x), z, self.in_proj_b(x), self.in_proj_a(x)
        # Each key head's group holds its q, k, then its value heads' v and z (and their b, then a).
        group = shape.num_value_heads // shape.num_key_heads
        dk, vz = shape.key_head_dim, group * shape.value_head_dim
        qkvz = self.in_proj_qkvz(x).view(tokens, shape.num_key_heads, 2 * dk + 2 * vz)
        q, k, v, z = qkvz.split([dk, dk, vz, vz], dim=-1)
        b, a = self.in_proj_ba(x).view(tokens, shape.num_key_heads, 2 * group).split([group, group], dim=-1)
        qkv = torch.cat((q.reshape(tokens, -1), k.reshape(tokens, -1), v.reshape(tokens, -1)), dim=-1)
        return (qkv, z.reshape(tokens, shape.num_value_heads, shape.value_head_dim),
                b.reshape(tokens, -1), a.reshape(tokens, -1))

    def _heads(self, mixed: torch.Tensor):
        """The convolved q, k [N, Hv, Dk] (l2-normalised, each key head repeated for its value heads), v [N, Hv, Dv]."""
        shape, tokens = self.shape, mixed.shape[0]
        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        group = shape.num_value_heads // shape.num_key_heads
        q, k = (_l2norm(t.reshape(tokens, shape.num_key_heads, shape.key_head_dim)).repeat_interleave(group, dim=1)
                for t in (q, k))
        return q, k, v.reshape(tokens, shape.num_value_heads, shape.value_head_dim)



class GatedRMSNorm(nn.Module):
    """RMSNorm over each value head (a plain weight, not Qwen3-Next's 1 + weight), then gated by silu(z)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * normed.to(x.dtype) * F.silu(z.float())).to(x.dtype)


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)
