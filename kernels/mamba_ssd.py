"""Mamba2's selective state space update (the scan of its state space duality form): a fixed-size state per head,
decayed by exp(dt * A) and fed by dt * x * B, read by C, plus the D skip.

States live in the pool in fp32 and are updated in place at each sequence's slot. Plain PyTorch, for correctness.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mamba_chunk_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                     D: torch.Tensor, dt_bias: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                     query_start_loc: torch.Tensor, has_initial_state: torch.Tensor,
                     dt_softplus: bool = True) -> torch.Tensor:
    """Prefill: x [T, H, P]; dt [T, H]; A [H]; B, C [T, G, N] (G groups of heads); D [H]; dt_bias [H];
    states [S, H, P, N] fp32, the pool; slots [B] int64; query_start_loc [B+1] int32; has_initial_state [B] bool.
    Returns y [T, H, P]; each sequence's final state is written to states[slot]."""
    y = torch.empty_like(x)
    starts = query_start_loc.tolist()
    for i, slot in enumerate(slots.tolist()):
        state = states[slot] if bool(has_initial_state[i]) else torch.zeros_like(states[slot])
        for t in range(starts[i], starts[i + 1]):
            state, y[t] = _step(state, x[t], dt[t], A, B[t], C[t], D, dt_bias, dt_softplus)
        states[slot] = state
    return y


def mamba_state_update(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                       D: torch.Tensor, dt_bias: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                       dt_softplus: bool = True) -> torch.Tensor:
    """Decode, one token per sequence, all sequences in one batched call: x [B, H, P]; dt [B, H]; B, C [B, G, N].
    Returns y [B, H, P]; states[slots] advance by one token."""
    state, y = _step(states[slots], x, dt, A, B, C, D, dt_bias, dt_softplus)
    states[slots] = state
    return y.to(x.dtype)


def _step(state, x, dt, A, B, C, D, dt_bias, dt_softplus):
    """One token: state [..., H, P, N] fp32 -> (new state, y [..., H, P])."""
    heads_per_group = x.shape[-2] // B.shape[-2]
    B, C = (t.float().repeat_interleave(heads_per_group, dim=-2) for t in (B, C))  # [..., H, N]
    x, dt = x.float(), dt.float() + dt_bias.float()
    dt = F.softplus(dt) if dt_softplus else dt
    state = state * (dt * A.float()).exp()[..., None, None] + (dt[..., None] * x)[..., None] * B[..., None, :]
    y = (state * C[..., None, :]).sum(-1) + D.float()[:, None] * x
    return state, y
