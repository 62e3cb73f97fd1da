"""The short causal convolution in front of a hybrid model's recurrent layers (gated delta-net, Mamba2).

Each channel is convolved with its own ``K`` taps over the sequence's last ``K`` inputs, so a
sequence carries its last ``K - 1`` inputs from step to step: its conv state, one slot of the state
pool ``conv_states`` [S, C, K-1]. A step's prefill sequences arrive concatenated (``x`` [T, C],
bounded by ``query_start_loc``); a sequence whose ``has_initial_state`` is set continues from its
slot (a later chunk of a chunked prefill), the others start from zeros. Decode is one token per
sequence (``causal_conv1d_update``).

- ``*_ref``: per token, the tests' ground truth (it matches transformers' ``causal_conv1d_fn`` /
  ``causal_conv1d_update``).
- CPU: ``F.conv1d`` per sequence for prefill; decode is one batched window product.
- Triton: one program per (token, channel block) computes outputs from the sequence's inputs and
  its stored state; a second launch writes each sequence's new state after every read of the old.
  Decode is the same two launches with one token per sequence.
Accumulation is fp32; outputs take ``x``'s dtype, states the pool's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._triton import Launch, jit, next_power_of_2, tl

_ACTIVATIONS = (None, "silu", "swish")


def _activate(y: torch.Tensor, activation: str | None) -> torch.Tensor:
    return F.silu(y) if activation in ("silu", "swish") else y


def _check(x: torch.Tensor, weight: torch.Tensor, conv_states: torch.Tensor, activation: str | None) -> None:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"causal_conv1d activation must be one of {_ACTIVATIONS}, got {activation!r}")
    channels, taps = weight.shape
    if x.shape[-1] != channels or conv_states.shape[1:] != (channels, taps - 1):
        raise ValueError(f"causal_conv1d: x {tuple(x.shape)}, weight {tuple(weight.shape)} and conv_states "
                         f"{tuple(conv_states.shape)} disagree (want x [T, C], weight [C, K], states [S, C, K-1])")


def _history(conv_states: torch.Tensor, slot: int, has_initial_state: bool) -> torch.Tensor:
    """A sequence's stored inputs [C, K-1] in fp32: its slot's, or zeros for a new sequence."""
    state = conv_states[slot].float()
    return state if has_initial_state else torch.zeros_like(state)


def causal_conv1d_prefill_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                              conv_states: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                              has_initial_state: torch.Tensor, activation: str | None = "silu") -> torch.Tensor:
    """Per token: y[t] = act(sum_j weight[:, j] * input[t - K + 1 + j] + bias)."""
    _check(x, weight, conv_states, activation)
    taps = weight.shape[1]
    y = torch.empty_like(x)
    bounds = query_start_loc.tolist()
    for seq, (slot, initial) in enumerate(zip(slots.tolist(), has_initial_state.tolist())):
        start, end = bounds[seq], bounds[seq + 1]
        inputs = torch.cat([_history(conv_states, slot, initial), x[start:end].float().T], dim=1)
        for t in range(end - start):
            out = (inputs[:, t:t + taps] * weight.float()).sum(-1)
            out = out + bias.float() if bias is not None else out
            y[start + t] = _activate(out, activation).to(x.dtype)
        conv_states[slot] = inputs[:, inputs.shape[1] - (taps - 1):].to(conv_states.dtype)
    return y


def causal_conv1d_update_ref(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                             conv_states: torch.Tensor, slots: torch.Tensor,
                             activation: str | None = "silu") -> torch.Tensor:  # x [B, C] -> [B, C]
    count = x.shape[0]
    return causal_conv1d_prefill_ref(x, weight, bias, conv_states, slots, _one_token_each(count, x.device),
                                     torch.ones(count, dtype=torch.bool, device=x.device), activation)


def _one_token_each(count: int, device: torch.device) -> torch.Tensor:
    return torch.arange(count + 1, dtype=torch.int32, device=device)


# --- what the layers call ----------------------------------------------------------------------------


def causal_conv1d_prefill(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          conv_states: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                          has_initial_state: torch.Tensor, activation: str | None = "silu") -> torch.Tensor:
    """The step's prefill tokens ``x`` [T, C] convolved per sequence -> y [T, C]; each sequence's
    last K-1 inputs are written to ``conv_states[slots[b]]``. Triton on CUDA, ``F.conv1d`` elsewhere."""
    _check(x, weight, conv_states, activation)
    if x.device.type == "cuda":
        return causal_conv1d_prefill_triton(x, weight, bias, conv_states, slots, query_start_loc,
                                            has_initial_state, activation)
    taps = weight.shape[1]
    y = torch.empty_like(x)
    bounds = query_start_loc.tolist()
    for seq, (slot, initial) in enumerate(zip(slots.tolist(), has_initial_state.tolist())):
        start, end = bounds[seq], bounds[seq + 1]
        inputs = torch.cat([_history(conv_states, slot, initial), x[start:end].float().T], dim=1)
        out = F.conv1d(inputs[None], weight.float()[:, None], None if bias is None else bias.float(),
                       groups=weight.shape[0])[0]
        y[start:end] = _activate(out, activation).T.to(x.dtype)
        conv_states[slot] = inputs[:, inputs.shape[1] - (taps - 1):].to(conv_states.dtype)
    return y


def causal_conv1d_update(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                         conv_states: torch.Tensor, slots: torch.Tensor,
                         activation: str | None = "silu") -> torch.Tensor:  # x [B, C] -> [B, C]
    """One decode token per sequence, all sequences in one batched call; states updated in place."""
    _check(x, weight, conv_states, activation)
    if x.device.type == "cuda":
        return causal_conv1d_update_triton(x, weight, bias, conv_states, slots, activation)
    windows = torch.cat([conv_states[slots].float(), x.float()[:, :, None]], dim=2)  # [B, C, K]
    out = (windows * weight.float()).sum(-1)
    out = out + bias.float() if bias is not None else out
    conv_states[slots] = windows[:, :, 1:].to(conv_states.dtype)
    return _activate(out, activation).to(x.dtype)


# --- Triton --------------------------------------------------------------------------------------------

_BLOCK_C = 128  # channels per program: conv channels number thousands, taps a handful


@jit
def _conv_tokens_kernel(x_ptr, w_ptr, bias_ptr, states_ptr, y_ptr, slots_ptr, qsl_ptr, seq_of_token_ptr,
                        has_init_ptr, channels, x_stride, s_stride_slot, s_stride_c,
                        TAPS: tl.constexpr, TAPS_P2: tl.constexpr, HAS_BIAS: tl.constexpr,
                        SILU: tl.constexpr, BLOCK_C: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    taps = tl.arange(0, TAPS_P2)
    seq = tl.load(seq_of_token_ptr + token)
    start = tl.load(qsl_ptr + seq).to(tl.int64)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    # The oldest stored column a tap may read: none (0) for a new sequence.
    oldest = tl.where(tl.load(has_init_ptr + seq) != 0, 1 - TAPS, 0)
    # Tap j reads the input at position pos - (TAPS - 1) + j: from x when inside this step's tokens,
    # else from the stored state's column TAPS - 1 + src (zeros for a new sequence).
    src = (token - start) - (TAPS - 1) + taps
    c_mask = chans[:, None] < channels
    tap_mask = taps[None, :] < TAPS
    from_x = tl.load(x_ptr + (start + src)[None, :] * x_stride + chans[:, None],
                     mask=c_mask & tap_mask & (src[None, :] >= 0), other=0.0).to(tl.float32)
    from_state = tl.load(states_ptr + slot * s_stride_slot + chans[:, None] * s_stride_c + (TAPS - 1 + src)[None, :],
                         mask=c_mask & tap_mask & (src[None, :] < 0) & (src[None, :] >= oldest), other=0.0).to(tl.float32)
    w = tl.load(w_ptr + chans[:, None] * TAPS + taps[None, :], mask=c_mask & tap_mask, other=0.0).to(tl.float32)
    out = tl.sum((from_x + from_state) * w, axis=1)
    if HAS_BIAS:
        out += tl.load(bias_ptr + chans, mask=chans < channels, other=0.0).to(tl.float32)
    if SILU:
        out = out * tl.sigmoid(out)
    tl.store(y_ptr + token * channels + chans, out.to(y_ptr.dtype.element_ty), mask=chans < channels)


@jit
def _conv_state_kernel(x_ptr, states_ptr, slots_ptr, qsl_ptr, has_init_ptr, channels, x_stride,
                       s_stride_slot, s_stride_c, TAPS: tl.constexpr, KEEP_P2: tl.constexpr,
                       BLOCK_C: tl.constexpr):
    seq = tl.program_id(0)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cols = tl.arange(0, KEEP_P2)
    start = tl.load(qsl_ptr + seq).to(tl.int64)
    length = tl.load(qsl_ptr + seq + 1).to(tl.int64) - start
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    oldest = tl.where(tl.load(has_init_ptr + seq) != 0, 1 - TAPS, 0)
    # Column i of the new state is the input at position length - (TAPS - 1) + i; all of it is
    # loaded before any is stored, since a short sequence keeps part of its old state.
    src = length - (TAPS - 1) + cols
    mask = (chans[:, None] < channels) & (cols[None, :] < TAPS - 1)
    state_ptrs = states_ptr + slot * s_stride_slot + chans[:, None] * s_stride_c
    from_x = tl.load(x_ptr + (start + src)[None, :] * x_stride + chans[:, None], mask=mask & (src[None, :] >= 0),
                     other=0.0)
    from_state = tl.load(state_ptrs + (TAPS - 1 + src)[None, :], mask=mask & (src[None, :] < 0) & (src[None, :] >= oldest),
                         other=0.0)
    kept = tl.where(src[None, :] >= 0, from_x.to(tl.float32), from_state.to(tl.float32))
    tl.store(state_ptrs + cols[None, :], kept.to(states_ptr.dtype.element_ty), mask=mask)


def causal_conv1d_launches(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                           conv_states: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                           has_initial_state: torch.Tensor, activation: str | None, y: torch.Tensor,
                           seq_of_token: torch.Tensor) -> list[Launch]:
    """Outputs, then states. Grids: ``(T, cdiv(C, 128))`` (a token, a channel block) reading
    K inputs per output; ``(B, cdiv(C, 128))`` (a sequence, a channel block) writing K-1 columns."""
    channels, taps = weight.shape
    blocks = -(-channels // _BLOCK_C)
    strides = (x.stride(0), conv_states.stride(0), conv_states.stride(1))
    has_init = has_initial_state.to(torch.int8) if has_initial_state.dtype == torch.bool else has_initial_state
    tokens = Launch(_conv_tokens_kernel, (x.shape[0], blocks),
                    (x, weight, bias if bias is not None else weight, conv_states, y, slots, query_start_loc,
                     seq_of_token, has_init, channels, *strides),
                    {"TAPS": taps, "TAPS_P2": next_power_of_2(taps), "HAS_BIAS": bias is not None,
                     "SILU": activation is not None, "BLOCK_C": _BLOCK_C})
    states = Launch(_conv_state_kernel, (slots.shape[0], blocks),
                    (x, conv_states, slots, query_start_loc, has_init, channels, *strides),
                    {"TAPS": taps, "KEEP_P2": next_power_of_2(max(taps - 1, 1)), "BLOCK_C": _BLOCK_C})
    return [tokens, states]


def causal_conv1d_prefill_triton(x, weight, bias, conv_states, slots, query_start_loc, has_initial_state,
                                 activation="silu") -> torch.Tensor:
    """Triton version of :func:`causal_conv1d_prefill_ref`."""
    _check(x, weight, conv_states, activation)
    if x.stride(-1) != 1 or weight.stride(-1) != 1 or conv_states.stride(-1) != 1:
        raise ValueError("causal_conv1d: x, weight and conv_states need a unit last stride")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0] == 0:
        return y
    lengths = query_start_loc[1:] - query_start_loc[:-1]
    seq_of_token = torch.repeat_interleave(torch.arange(slots.shape[0], device=x.device), lengths,
                                           output_size=x.shape[0])
    for launch in causal_conv1d_launches(x, weight.contiguous(), bias, conv_states, slots, query_start_loc,
                                         has_initial_state, activation, y, seq_of_token):
        launch()
    return y


def causal_conv1d_update_triton(x, weight, bias, conv_states, slots, activation="silu") -> torch.Tensor:
    """Triton version of :func:`causal_conv1d_update_ref`: the prefill kernels, one token per sequence."""
    count = x.shape[0]
    return causal_conv1d_prefill_triton(x, weight, bias, conv_states, slots, _one_token_each(count, x.device),
                                        torch.ones(count, dtype=torch.bool, device=x.device), activation)
