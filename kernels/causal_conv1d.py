"""Causal depthwise convolution over each sequence's recent inputs, the front of gated delta-net and Mamba2 layers.

A sequence's last K-1 inputs live in its slot of the state pool, so a later prefill chunk or a decode step
continues the convolution where the previous one stopped. Plain PyTorch, written for correctness.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d_prefill(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          conv_states: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                          has_initial_state: torch.Tensor, activation: str | None = "silu") -> torch.Tensor:
    """x [T, C]: the step's tokens of prefill sequences, concatenated; weight [C, K]; bias [C] or None;
    conv_states [S, C, K-1], the pool; slots [B] int64; query_start_loc [B+1] int32; has_initial_state [B] bool
    (a later chunk starts from conv_states[slot], a first one from zeros). Returns y [T, C]; each sequence's
    last K-1 inputs are written into conv_states[slot]."""
    y = torch.empty_like(x)
    starts = query_start_loc.tolist()
    for i, slot in enumerate(slots.tolist()):
        begin, end = starts[i], starts[i + 1]
        history = conv_states[slot] if bool(has_initial_state[i]) else torch.zeros_like(conv_states[slot])
        window = torch.cat((history, x[begin:end].t().to(history.dtype)), dim=-1)  # [C, K-1+L]
        conv_states[slot] = window[:, window.shape[1] - history.shape[1]:]
        out = F.conv1d(window[None].float(), weight.float()[:, None], None if bias is None else bias.float(),
                       groups=weight.shape[0])[0]
        y[begin:end] = _activate(out, activation).t().to(x.dtype)
    return y


def causal_conv1d_update(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         conv_states: torch.Tensor, slots: torch.Tensor, activation: str | None = "silu") -> torch.Tensor:
    """One token per sequence, all sequences in one batched call: x [B, C] -> y [B, C]; conv_states[slots]
    shift by one input."""
    window = torch.cat((conv_states[slots], x[:, :, None].to(conv_states.dtype)), dim=-1)  # [B, C, K]
    conv_states[slots] = window[:, :, 1:]
    out = (window.float() * weight.float()).sum(-1)
    if bias is not None:
        out = out + bias.float()
    return _activate(out, activation).to(x.dtype)


def _activate(x: torch.Tensor, activation: str | None) -> torch.Tensor:
    if activation in ("silu", "swish"):
        return F.silu(x)
    if activation is None:
        return x
    raise ValueError(f"causal conv1d activation {activation!r} is not supported (silu or none)")
