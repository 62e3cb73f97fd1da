"""The Mamba2 token mixer of Granite 4.0-H's recurrent layers: one projection into a gate, the conv inputs
(x, B, C) and a time step per head; a causal convolution over x, B and C; the selective state space scan;
an RMSNorm gated by the gate; the output projection.

Its fixed-size state per sequence (the convolution's last inputs, the scan's [H, P, N] matrix per head in fp32)
lives in the engine's state pool, as the gated delta-net's does: decoding sequences advance with one batched
call per kernel, prefilling ones (first or later chunks) go through the prefill kernels, which continue from the
pool where ``has_initial_state`` says so. ``states`` is bound by the model runner.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.kernels.mamba_ssd import chunk_scratch_bytes, mamba_chunk_scan, mamba_state_update
from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.linear import Linear
from bulkinfer.layers.step_conv import causal_conv1d_step


@dataclass(frozen=True)
class Mamba2Shape:
    hidden_size: int
    num_heads: int
    head_dim: int  # num_heads * head_dim is the mixer's inner width
    num_groups: int  # heads share B and C in groups; the gated norm normalizes each group's share of the width
    state_size: int
    conv_kernel: int
    rms_norm_eps: float
    conv_bias: bool
    proj_bias: bool  # in_proj and out_proj


class Mamba2Mixer(nn.Module):
    def __init__(self, shape: Mamba2Shape):
        super().__init__()
        self.shape = shape
        self.inner = shape.num_heads * shape.head_dim
        self.bc_size = shape.num_groups * shape.state_size
        self.conv_dim = self.inner + 2 * self.bc_size
        self.in_proj = Linear(shape.hidden_size, self.inner + self.conv_dim + shape.num_heads, bias=shape.proj_bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, shape.conv_kernel, groups=self.conv_dim,
                                bias=shape.conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(shape.num_heads))
        self.A_log = nn.Parameter(torch.zeros(shape.num_heads))
        self.D = nn.Parameter(torch.ones(shape.num_heads))
        self.norm = GroupGatedRMSNorm(self.inner, shape.num_groups, shape.rms_norm_eps)
        self.out_proj = Linear(self.inner, shape.hidden_size, bias=shape.proj_bias)
        self.states: list[torch.Tensor] = []  # bound by the model runner: [conv windows, SSM states]

    def state_specs(self) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """Per sequence: the convolution's last K-1 inputs, and each head's SSM state [P, N] in fp32."""
        shape = self.shape
        return [((self.conv_dim, shape.conv_kernel - 1), self.conv1d.weight.dtype),
                ((shape.num_heads, shape.head_dim, shape.state_size), torch.float32)]

    def prefill_scratch_bytes(self, tokens: int, seqs: int) -> int:
        """What the chunked Triton prefill of ``tokens`` rows in ``seqs`` sequences allocates (freed after it)."""
        shape = self.shape
        return chunk_scratch_bytes(tokens, seqs, shape.num_heads, shape.head_dim, shape.state_size,
                                   self.out_proj.weight.dtype)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        gate, xbc, dt = self.in_proj(x).split([self.inner, self.conv_dim, self.shape.num_heads], dim=-1)
        batch, (conv_states, ssm_states) = attn.recurrent, self.states
        weight, bias = self.conv1d.weight[:, 0], self.conv1d.bias
        A = -self.A_log.float().exp()
        heads, B, C = self._split(causal_conv1d_step(xbc, weight, bias, conv_states, batch, "silu"))
        out = torch.empty_like(heads)
        if batch.decode_rows.numel():
            rows = batch.decode_rows
            out[rows] = mamba_state_update(heads[rows], dt[rows], A, B[rows], C[rows], self.D, self.dt_bias,
                                           ssm_states, batch.decode_slots)
        if batch.prefill_rows.numel():
            rows = batch.prefill_rows
            out[rows] = mamba_chunk_scan(heads[rows], dt[rows], A, B[rows], C[rows], self.D, self.dt_bias, ssm_states,
                                         batch.prefill_slots, batch.prefill_query_start_loc,
                                         batch.prefill_has_initial_state)
        return self.out_proj(self.norm(out.view(x.shape[0], self.inner), gate))

    def _split(self, mixed: torch.Tensor):
        """The convolved x [N, H, P], B and C [N, G, N_state]: views of ``mixed``."""
        shape, tokens = self.shape, mixed.shape[0]
        heads, B, C = mixed.split([self.inner, self.bc_size, self.bc_size], dim=-1)
        return (heads.view(tokens, shape.num_heads, shape.head_dim),
                B.view(tokens, shape.num_groups, shape.state_size), C.view(tokens, shape.num_groups, shape.state_size))


class GroupGatedRMSNorm(nn.Module):
    """Mamba2's gated norm: gated by silu(z) first, then an RMSNorm over each group's share of the width, then
    the weight (the gated delta-net's norms each head before its gate, so it is a different function)."""

    def __init__(self, size: int, groups: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.groups = groups
        self.eps = eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # [T, size], [T, size] -> [T, size]
        gated = (x.float() * F.silu(z.float())).view(x.shape[0], self.groups, -1)
        normed = gated * torch.rsqrt(gated.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.view_as(x).to(x.dtype)
