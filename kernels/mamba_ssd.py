"""Mamba2's selective state space scan (SSD), in Granite 4.0-H, Nemotron-H, Falcon-H1 and Bamba.

Each head keeps a state S [P, N] (fp32, one slot of the pool ``states`` [S, H, P, N]). Heads share
B and C in G groups (head h reads group ``h // (H / G)``). Per token, with ``dt' = softplus(dt + dt_bias)``::

    S = exp(dt' * A) * S + dt' * x ⊗ B;   y = S @ C + D * x

- ``*_ref``: per token, the tests' ground truth (it matches transformers' ``mamba2_chunk_scan`` and
  ``mamba2_selective_state_update``).
- CPU: prefill in chunks of 64 tokens (the SSD form: within a chunk, a masked decay matrix times
  C B^T; between chunks, the state), per sequence with all heads batched; decode is one batched
  step over all sequences (in blocks of at most 8 MiB of state, kernels/state_blocks.py).
- Triton: one program per (sequence, head, block of P) keeps its rows of S in registers and walks
  the sequence's tokens; decode is the same kernel with one token per sequence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._triton import Launch, jit, next_power_of_2, tl
from .state_blocks import state_blocks

CHUNK = 64


def _check(x: torch.Tensor, B: torch.Tensor, states: torch.Tensor) -> None:
    heads, head_dim, state_size = states.shape[1:]
    if x.shape[-2:] != (heads, head_dim) or B.shape[-1] != state_size or heads % B.shape[-2]:
        raise ValueError(f"mamba scan: x {tuple(x.shape)}, B {tuple(B.shape)} and states {tuple(states.shape)} "
                         "disagree (want x [T, H, P], B and C [T, G, N] with H % G == 0, states [S, H, P, N])")


def _discretized(dt, A, B, C, dt_bias, dt_softplus, heads) -> tuple[torch.Tensor, ...]:
    """fp32 (dt' [L, H], log decay dt' * A [L, H], B and C per head [L, H, N])."""
    dt = dt.float() + dt_bias.float()
    dt = F.softplus(dt) if dt_softplus else dt
    group = heads // B.shape[-2]
    return (dt, dt * A.float(), B.float().repeat_interleave(group, dim=-2),
            C.float().repeat_interleave(group, dim=-2))


def _initial(states: torch.Tensor, slot: int, has_initial_state: bool) -> torch.Tensor:
    state = states[slot].float()
    return state if has_initial_state else torch.zeros_like(state)


def _recurrent_steps(x, dt, log_decay, B, C, state) -> torch.Tensor:
    """Tokens one at a time (x [L, H, P] fp32 ...; state [H, P, N], updated in place) -> [L, H, P] without D."""
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        state.mul_(log_decay[t].exp()[:, None, None]).add_((dt[t, :, None] * x[t])[:, :, None] * B[t][:, None, :])
        out[t] = torch.einsum("hpn,hn->hp", state, C[t])
    return out


def mamba_chunk_scan_ref(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                         dt_softplus: bool = True) -> torch.Tensor:
    """Per token and per sequence: the ground truth of :func:`mamba_chunk_scan`."""
    return _per_sequence(_recurrent_steps, x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc,
                         has_initial_state, dt_softplus)


def mamba_state_update_ref(x, dt, A, B, C, D, dt_bias, states, slots, dt_softplus: bool = True) -> torch.Tensor:
    count = x.shape[0]
    return mamba_chunk_scan_ref(x, dt, A, B, C, D, dt_bias, states, slots, _one_token_each(count, x.device),
                                torch.ones(count, dtype=torch.bool, device=x.device), dt_softplus)


def _one_token_each(count: int, device: torch.device) -> torch.Tensor:
    return torch.arange(count + 1, dtype=torch.int32, device=device)


def _per_sequence(scan, x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                  dt_softplus) -> torch.Tensor:
    """Run ``scan`` over each sequence of the step from its initial state; write the final states."""
    _check(x, B, states)
    y = torch.empty_like(x)
    bounds = query_start_loc.tolist()
    for seq, (slot, initial) in enumerate(zip(slots.tolist(), has_initial_state.tolist())):
        span = slice(bounds[seq], bounds[seq + 1])
        state = _initial(states, slot, initial)
        inputs = x[span].float()
        scanned = scan(inputs, *_discretized(dt[span], A, B[span], C[span], dt_bias, dt_softplus, x.shape[1]), state)
        y[span] = (scanned + D.float()[:, None] * inputs).to(x.dtype)
        states[slot] = state
    return y


# --- the CPU path ----------------------------------------------------------------------------------


def _chunked(x: torch.Tensor) -> torch.Tensor:
    """[L, H, ...] -> [H, chunks, 64, ...], zero-padded: a padded token (dt' = 0) leaves the state as it is."""
    x = x.movedim(1, 0)
    x = torch.cat([x, x.new_zeros(x.shape[0], -x.shape[1] % CHUNK, *x.shape[2:])], dim=1)
    return x.view(x.shape[0], -1, CHUNK, *x.shape[2:])


def _chunk_form(x, dt, log_decay, B, C, state) -> torch.Tensor:
    """One sequence in chunks of 64, all heads at once (state [H, P, N], updated in place) -> [L, H, P] without D."""
    length = x.shape[0]
    x_dt, log_decay, B, C = (_chunked(t) for t in (x * dt[..., None], log_decay, B, C))
    cum = log_decay.cumsum(-1)  # [H, N, 64]: log decay from the chunk's start through each token
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=x.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # token j -> i
    within = (C @ B.transpose(-1, -2)) * decay
    C_decayed = C * cum.exp()[..., None]
    x_to_end = x_dt * (cum[..., -1:] - cum).exp()[..., None]
    out = torch.empty_like(x_dt)
    for c in range(x_dt.shape[1]):
        out[:, c] = within[:, c] @ x_dt[:, c] + C_decayed[:, c] @ state.transpose(-1, -2)
        state.mul_(cum[:, c, -1].exp()[:, None, None]).add_(x_to_end[:, c].transpose(-1, -2) @ B[:, c])
    return out.flatten(1, 2)[:, :length].movedim(0, 1)


# --- what the layers call ----------------------------------------------------------------------------


def mamba_chunk_scan(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                     D: torch.Tensor, dt_bias: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                     query_start_loc: torch.Tensor, has_initial_state: torch.Tensor,
                     dt_softplus: bool = True) -> torch.Tensor:
    """A step's prefill tokens (x [T, H, P]; dt [T, H]; B, C [T, G, N]; A, D, dt_bias [H]) -> y [T, H, P];
    each sequence starts from ``states[slot]`` when ``has_initial_state`` (else zeros) and its final
    state is written there. Triton on CUDA; on the CPU the chunk form, one sequence at a time."""
    _check(x, B, states)
    if x.device.type == "cuda":
        return mamba_scan_triton(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                                 dt_softplus)
    return _per_sequence(_chunk_form, x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc,
                         has_initial_state, dt_softplus)


def mamba_state_update(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                       D: torch.Tensor, dt_bias: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                       dt_softplus: bool = True) -> torch.Tensor:  # x [B, H, P]; dt [B, H]; B, C [B, G, N]
    """One decode token per sequence, all sequences in one batched step; states updated in place."""
    _check(x, B, states)
    if x.device.type == "cuda":
        return mamba_state_update_triton(x, dt, A, B, C, D, dt_bias, states, slots, dt_softplus)
    dt, log_decay, B, C = _discretized(dt, A, B, C, dt_bias, dt_softplus, x.shape[1])  # [B, H], [B, H, N]
    inputs = x.float()
    y = torch.empty_like(inputs)
    for block in state_blocks(x.shape[0], states[0].numel() * states.element_size()):
        state = states[slots[block]]  # [b, H, P, N] fp32, a copy
        flat = state.view(-1, *state.shape[2:])  # the rank-one update as one batched product, without a temporary
        flat.mul_(log_decay[block].exp().view(-1, 1, 1)).baddbmm_(
            (dt[block, :, None] * inputs[block]).view(-1, x.shape[-1], 1), B[block].reshape(flat.shape[0], 1, -1))
        states[slots[block]] = state
        y[block] = torch.einsum("bhpn,bhn->bhp", state, C[block])
    return (y + D.float()[:, None] * inputs).to(x.dtype)


# --- Triton --------------------------------------------------------------------------------------------


@jit
def _mamba_scan_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, dt_bias_ptr, states_ptr, y_ptr, slots_ptr,
                       qsl_ptr, has_init_ptr, heads, groups, head_dim, state_size, x_stride, dt_stride, B_stride,
                       C_stride, DT_SOFTPLUS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    cols = tl.arange(0, BLOCK_N)
    row_mask, col_mask = rows < head_dim, cols < state_size
    group = head // (heads // groups)
    start = tl.load(qsl_ptr + seq).to(tl.int64)
    end = tl.load(qsl_ptr + seq + 1).to(tl.int64)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    state_ptrs = states_ptr + ((slot * heads + head) * head_dim + rows[:, None]) * state_size + cols[None, :]
    tile_mask = row_mask[:, None] & col_mask[None, :]
    state = tl.load(state_ptrs, mask=tile_mask, other=0.0)  # [BLOCK_P, BLOCK_N] fp32
    state = tl.where(tl.load(has_init_ptr + seq) != 0, state, 0.0)  # a new sequence ignores the slot's leftovers
    A = tl.load(A_ptr + head).to(tl.float32)
    D = tl.load(D_ptr + head).to(tl.float32)
    dt_bias = tl.load(dt_bias_ptr + head).to(tl.float32)
    for t in range(start, end):
        x = tl.load(x_ptr + t * x_stride + head * head_dim + rows, mask=row_mask, other=0.0).to(tl.float32)
        B = tl.load(B_ptr + t * B_stride + group * state_size + cols, mask=col_mask, other=0.0).to(tl.float32)
        C = tl.load(C_ptr + t * C_stride + group * state_size + cols, mask=col_mask, other=0.0).to(tl.float32)
        dt = tl.load(dt_ptr + t * dt_stride + head).to(tl.float32) + dt_bias
        if DT_SOFTPLUS:  # torch's softplus: linear above 20
            dt = tl.where(dt > 20.0, dt, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))))
        state = state * tl.exp(dt * A) + (dt * x)[:, None] * B[None, :]
        y = tl.sum(state * C[None, :], axis=1) + D * x
        tl.store(y_ptr + (t * heads + head) * head_dim + rows, y.to(y_ptr.dtype.element_ty), mask=row_mask)
    tl.store(state_ptrs, state, mask=tile_mask)


def mamba_scan_launch(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                      dt_softplus: bool, y) -> Launch:
    """Grid ``(B, H, cdiv(P, BLOCK_P))``: a sequence, a head, a block of the state's rows, which the
    program holds in registers over the sequence's tokens. Reads each token's x, B, C once per row
    block; reads and writes the state once."""
    heads, head_dim, state_size = states.shape[1:]
    block_n = next_power_of_2(state_size)
    block_p = min(next_power_of_2(head_dim), max(16, 4096 // block_n))  # a state tile of at most 4,096 fp32
    has_init = has_initial_state.to(torch.int8) if has_initial_state.dtype == torch.bool else has_initial_state
    return Launch(_mamba_scan_kernel, (slots.shape[0], heads, -(-head_dim // block_p)),
                  (x, dt, A, B, C, D, dt_bias, states, y, slots, query_start_loc, has_init, heads, B.shape[-2],
                   head_dim, state_size, x.stride(0), dt.stride(0), B.stride(0), C.stride(0)),
                  {"DT_SOFTPLUS": dt_softplus, "BLOCK_P": block_p, "BLOCK_N": block_n, "num_warps": 4})


def mamba_scan_triton(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                      dt_softplus: bool = True) -> torch.Tensor:
    """Triton version of :func:`mamba_chunk_scan_ref` (and, one token per sequence, of the update)."""
    _check(x, B, states)
    if states.dtype != torch.float32 or not states.is_contiguous():
        raise ValueError("mamba scan: states must be a contiguous fp32 pool")
    for name, t in (("x", x), ("B", B), ("C", C)):
        if t.stride(-1) != 1 or t.stride(-2) != t.shape[-1]:
            raise ValueError(f"mamba scan: {name} needs contiguous heads (a token's row may be a slice)")
    if dt.stride(-1) != 1:
        raise ValueError("mamba scan: dt needs a unit head stride")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0]:
        mamba_scan_launch(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                          dt_softplus, y)()
    return y


def mamba_state_update_triton(x, dt, A, B, C, D, dt_bias, states, slots, dt_softplus: bool = True) -> torch.Tensor:
    """Triton version of :func:`mamba_state_update_ref`: the prefill kernel, one token per sequence."""
    count = x.shape[0]
    return mamba_scan_triton(x, dt, A, B, C, D, dt_bias, states, slots, _one_token_each(count, x.device),
                             torch.ones(count, dtype=torch.bool, device=x.device), dt_softplus)
