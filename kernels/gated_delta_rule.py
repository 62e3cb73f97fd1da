"""The gated delta rule, the linear attention of Qwen3-Next and Qwen3.5: a fixed-size state per head instead of a
KV cache, decayed by exp(g), corrected toward each new value by beta, and read by the query.

States live in the pool in fp32 and are updated in place at each sequence's slot. q and k arrive l2-normalised:
the model normalises them BEFORE the call (transformers' use_qk_l2norm_in_kernel). Plain PyTorch, for correctness.
"""

from __future__ import annotations

import torch


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                           states: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                           has_initial_state: torch.Tensor, scale: float) -> torch.Tensor:
    """Prefill: q, k [T, H, Dk] (l2-normalised before the call); v [T, H, Dv]; g [T, H] (log decay); beta [T, H];
    states [S, H, Dk, Dv] fp32, the pool; slots [B] int64; query_start_loc [B+1] int32; has_initial_state [B]
    bool (a later chunk starts from states[slot], a first one from zeros). Returns o [T, H, Dv]; each sequence's
    final state is written to states[slot]."""
    out = torch.empty_like(v)
    starts = query_start_loc.tolist()
    for i, slot in enumerate(slots.tolist()):
        state = states[slot] if bool(has_initial_state[i]) else torch.zeros_like(states[slot])
        for t in range(starts[i], starts[i + 1]):
            state, out[t] = _step(state, q[t], k[t], v[t], g[t], beta[t], scale)
        states[slot] = state
    return out


def fused_recurrent_gated_delta_rule_update(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                                            beta: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                                            scale: float) -> torch.Tensor:
    """Decode, one token per sequence, all sequences in one batched call: q, k [B, H, Dk] (l2-normalised before
    the call); v [B, H, Dv]; g, beta [B, H]. Returns o [B, H, Dv]; states[slots] advance by one token."""
    state, out = _step(states[slots], q, k, v, g, beta, scale)
    states[slots] = state
    return out.to(v.dtype)


def _step(state, q, k, v, g, beta, scale):
    """One token: state [..., H, Dk, Dv] fp32 -> (new state, output [..., H, Dv])."""
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    state = state * g.exp()[..., None, None]
    remembered = (state * k[..., None]).sum(-2)  # what the state recalls for k: [..., H, Dv]
    delta = (v - remembered) * beta[..., None]
    state = state + k[..., None] * delta[..., None, :]
    return state, (state * (q * scale)[..., None]).sum(-2)
