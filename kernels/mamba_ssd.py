"""Mamba2's selective state space scan (SSD), in Granite 4.0-H, Nemotron-H, Falcon-H1 and Bamba.

Each head keeps a state S [P, N] (fp32, one slot of the pool ``states`` [S, H, P, N]). Heads share
B and C in G groups (head h reads group ``h // (H / G)``). Per token, with ``dt' = softplus(dt + dt_bias)``::

    S = exp(dt' * A) * S + dt' * x ⊗ B;   y = S @ C + D * x

- ``*_ref``: per token, the tests' ground truth (it matches transformers' ``mamba2_chunk_scan`` and
  ``mamba2_selective_state_update``).
- CPU: prefill in chunks of 64 tokens (the SSD form: within a chunk, a masked decay matrix times
  C B^T; between chunks, the state), per sequence with all heads batched; decode is one batched
  step over all sequences (in blocks of at most 8 MiB of state, kernels/state_blocks.py).
- Triton, prefill (:func:`mamba_chunk_scan_triton`): the same chunk form on the GPU, in two launches
  (the state's walk over each sequence's chunks, then the outputs of all chunks in parallel; see the
  Triton section).
- Triton, decode (:func:`mamba_state_update_triton`): one launch applies each sequence's one token to
  its state, a program per (sequence, head, block of P) with its rows of S in registers: with one
  token there is nothing to chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._triton import Launch, jit, next_power_of_2, run_all, tl
from .chunk_layout import (causal_decay, chunk_layout, chunk_precision, chunk_rows, dot_tile, load_chunk_rows,
                           max_chunks, store_chunk_rows)
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
        return mamba_chunk_scan_triton(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc,
                                       has_initial_state, dt_softplus)
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
#
# Prefill runs in chunks (kernels/chunk_layout.py), in two launches:
#   1. per (sequence, head, block of P): the state walks the sequence's chunks, not its tokens. At each
#      chunk it is saved (the outputs' starting state), then decayed through the chunk and given the
#      chunk's inputs as one product (x * dt' * decay to the chunk's end)^T @ B.
#   2. per (chunk, head, block of P): the outputs, C @ (the chunk's starting state)^T decayed from the
#      chunk's start, plus the chunk's causal (C B^T * decay * dt') @ x, plus D * x.
# Decode (one token per sequence) is one launch that applies the token to each state tile in registers.


@jit
def _step_sizes(dt_ptr, rows, dt_stride, head, dt_bias, mask, DT_SOFTPLUS: tl.constexpr):
    """dt' = softplus(dt + dt_bias) (torch's: linear above 20) or dt + dt_bias, fp32; 0 where masked,
    so that a padded token leaves the state as it is."""
    dt = tl.load(dt_ptr + rows * dt_stride + head, mask=mask, other=0.0).to(tl.float32) + dt_bias
    if DT_SOFTPLUS:
        dt = tl.where(dt > 20.0, dt, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))))
    return tl.where(mask, dt, 0.0)


@jit
def _ssd_state_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, dt_bias_ptr, states_ptr, chunk_states_ptr, slots_ptr, qsl_ptr,
                      has_init_ptr, first_chunk_ptr, heads, groups, head_dim, state_size, x_stride, dt_stride,
                      B_stride, DT_SOFTPLUS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_P: tl.constexpr,
                      BLOCK_N: tl.constexpr, DOT: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    row = tl.program_id(2) * BLOCK_P
    group = head // (heads // groups)
    start = tl.load(qsl_ptr + seq).to(tl.int64)
    end = tl.load(qsl_ptr + seq + 1).to(tl.int64)
    first = tl.load(first_chunk_ptr + seq).to(tl.int64)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    dims = row + tl.arange(0, BLOCK_P)
    cols = tl.arange(0, BLOCK_N)
    tile_mask = (dims < head_dim)[:, None] & (cols < state_size)[None, :]
    tile = (head * head_dim + dims[:, None]) * state_size + cols[None, :]  # a head's [BLOCK_P, N] rows of [H, P, N]
    state = tl.load(states_ptr + slot * heads * head_dim * state_size + tile, mask=tile_mask, other=0.0)
    state = tl.where(tl.load(has_init_ptr + seq) != 0, state, 0.0)  # a new sequence ignores the slot's leftovers
    A = tl.load(A_ptr + head).to(tl.float32)
    dt_bias = tl.load(dt_bias_ptr + head).to(tl.float32)
    for c in range(tl.cdiv(end - start, CHUNK)):
        tl.store(chunk_states_ptr + (first + c) * heads * head_dim * state_size + tile, state, mask=tile_mask)
        rows = start + c * CHUNK + tl.arange(0, CHUNK)
        row_mask = rows < end
        dt = _step_sizes(dt_ptr, rows, dt_stride, head, dt_bias, row_mask, DT_SOFTPLUS)
        cum = tl.cumsum(dt * A, 0)  # log decay from the chunk's start through each token
        total = tl.sum(dt * A, 0)
        x = load_chunk_rows(x_ptr, rows, row_mask, x_stride, head * head_dim, row, head_dim, BLOCK_P)
        B = load_chunk_rows(B_ptr, rows, row_mask, B_stride, group * state_size, 0, state_size, BLOCK_N)
        x_to_end = x * (dt * tl.exp(total - cum))[:, None]
        state = state * tl.exp(total) + tl.dot(tl.trans(x_to_end), B, input_precision=DOT)
    tl.store(states_ptr + slot * heads * head_dim * state_size + tile, state, mask=tile_mask)


@jit
def _ssd_output_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, dt_bias_ptr, chunk_states_ptr, y_ptr, starts_ptr,
                       ends_ptr, heads, groups, head_dim, state_size, x_stride, dt_stride, B_stride, C_stride,
                       DT_SOFTPLUS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_P: tl.constexpr,
                       BLOCK_N: tl.constexpr, DOT: tl.constexpr):
    chunk = tl.program_id(0).to(tl.int64)  # the scratch of starting states passes 2**31 values in long steps
    head = tl.program_id(1)
    row = tl.program_id(2) * BLOCK_P
    group = head // (heads // groups)
    rows, row_mask, filled = chunk_rows(starts_ptr, ends_ptr, chunk, CHUNK)
    state_rows = tl.where(filled, head_dim, 0)
    dt = _step_sizes(dt_ptr, rows, dt_stride, head, tl.load(dt_bias_ptr + head).to(tl.float32), row_mask,
                     DT_SOFTPLUS)
    cum = tl.cumsum(dt * tl.load(A_ptr + head).to(tl.float32), 0)
    dims = row + tl.arange(0, BLOCK_P)
    from_state = tl.zeros((CHUNK, BLOCK_P), dtype=tl.float32)
    scores = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
    for col in range(0, state_size, BLOCK_N):
        C = load_chunk_rows(C_ptr, rows, row_mask, C_stride, group * state_size, col, state_size, BLOCK_N)
        B = load_chunk_rows(B_ptr, rows, row_mask, B_stride, group * state_size, col, state_size, BLOCK_N)
        cols = col + tl.arange(0, BLOCK_N)
        state = tl.load(chunk_states_ptr + ((chunk * heads + head) * head_dim + dims[:, None]) * state_size
                        + cols[None, :], mask=(dims < state_rows)[:, None] & (cols < state_size)[None, :],
                        other=0.0)
        from_state += tl.dot(C, tl.trans(state), input_precision=DOT)
        scores += tl.dot(C, tl.trans(B), input_precision=DOT)
    scores *= causal_decay(cum, CHUNK, False) * dt[None, :]
    x = load_chunk_rows(x_ptr, rows, row_mask, x_stride, head * head_dim, row, head_dim, BLOCK_P)
    y = from_state * tl.exp(cum)[:, None] + tl.dot(scores, x, input_precision=DOT)
    y += tl.load(D_ptr + head).to(tl.float32) * x
    store_chunk_rows(y_ptr, y, rows, row_mask, heads, head, row, head_dim, BLOCK_P)


def mamba_chunk_scan_launches(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                              dt_softplus: bool, y: torch.Tensor) -> list[Launch]:
    """The state walk and the outputs (see above). Grids: ``(B, H, cdiv(P, BLOCK_P))`` and
    ``(chunks, H, cdiv(P, BLOCK_P))``, where ``chunks`` bounds the step's chunks. Scratch: each
    chunk's starting state [chunks, H, P, N] fp32."""
    heads, head_dim, state_size = states.shape[1:]
    chunk, precision = chunk_precision(x.dtype)
    layout = chunk_layout(query_start_loc, x.shape[0], chunk)
    chunk_states = torch.empty(layout.bound, heads, head_dim, state_size, dtype=torch.float32, device=x.device)
    has_init = has_initial_state.to(torch.int8) if has_initial_state.dtype == torch.bool else has_initial_state
    block_n = dot_tile(state_size)
    # The state walk holds a [BLOCK_P, N] fp32 tile of the state: at most 4,096 values, 2,048 for fp32 products.
    block_p = min(dot_tile(head_dim), max(16, (4096 if precision == "tf32" else 2048) // block_n))
    tiles = {"DT_SOFTPLUS": dt_softplus, "CHUNK": chunk, "BLOCK_P": block_p, "DOT": precision, "num_warps": 8}
    grid = (heads, -(-head_dim // block_p))
    sizes = (heads, B.shape[-2], head_dim, state_size)
    return [
        Launch(_ssd_state_kernel, (slots.shape[0], *grid),
               (x, dt, A, B, dt_bias, states, chunk_states, slots, query_start_loc, has_init, layout.first_chunk,
                *sizes, x.stride(0), dt.stride(0), B.stride(0)),
               {**tiles, "BLOCK_N": block_n}),
        Launch(_ssd_output_kernel, (layout.bound, *grid),
               (x, dt, A, B, C, D, dt_bias, chunk_states, y, layout.starts, layout.ends, *sizes, x.stride(0),
                dt.stride(0), B.stride(0), C.stride(0)),
               {**tiles, "BLOCK_N": min(block_n, 64)}),
    ]


@jit
def _ssd_decode_kernel(x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, dt_bias_ptr, states_ptr, y_ptr, slots_ptr, heads,
                       groups, head_dim, state_size, x_stride, dt_stride, B_stride, C_stride,
                       DT_SOFTPLUS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)  # also the token's row: one token per sequence
    head = tl.program_id(1)
    dims = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    cols = tl.arange(0, BLOCK_N)
    dim_mask, col_mask = dims < head_dim, cols < state_size
    group = head // (heads // groups)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    state_ptrs = states_ptr + ((slot * heads + head) * head_dim + dims[:, None]) * state_size + cols[None, :]
    tile_mask = dim_mask[:, None] & col_mask[None, :]
    state = tl.load(state_ptrs, mask=tile_mask, other=0.0)  # [BLOCK_P, BLOCK_N] fp32
    x = tl.load(x_ptr + seq * x_stride + head * head_dim + dims, mask=dim_mask, other=0.0).to(tl.float32)
    B = tl.load(B_ptr + seq * B_stride + group * state_size + cols, mask=col_mask, other=0.0).to(tl.float32)
    C = tl.load(C_ptr + seq * C_stride + group * state_size + cols, mask=col_mask, other=0.0).to(tl.float32)
    dt = _step_sizes(dt_ptr, seq, dt_stride, head, tl.load(dt_bias_ptr + head).to(tl.float32), True, DT_SOFTPLUS)
    state = state * tl.exp(dt * tl.load(A_ptr + head).to(tl.float32)) + (dt * x)[:, None] * B[None, :]
    y = tl.sum(state * C[None, :], axis=1) + tl.load(D_ptr + head).to(tl.float32) * x
    tl.store(y_ptr + (seq * heads + head) * head_dim + dims, y.to(y_ptr.dtype.element_ty), mask=dim_mask)
    tl.store(state_ptrs, state, mask=tile_mask)


def mamba_decode_launch(x, dt, A, B, C, D, dt_bias, states, slots, dt_softplus: bool, y: torch.Tensor) -> Launch:
    """Grid ``(B, H, cdiv(P, BLOCK_P))``: a sequence, a head, a block of the state's rows (at most
    4,096 fp32, in registers). Reads and writes each state once."""
    heads, head_dim, state_size = states.shape[1:]
    block_n = next_power_of_2(state_size)
    block_p = min(next_power_of_2(head_dim), max(16, 4096 // block_n))
    return Launch(_ssd_decode_kernel, (slots.shape[0], heads, -(-head_dim // block_p)),
                  (x, dt, A, B, C, D, dt_bias, states, y, slots, heads, B.shape[-2], head_dim, state_size,
                   x.stride(0), dt.stride(0), B.stride(0), C.stride(0)),
                  {"DT_SOFTPLUS": dt_softplus, "BLOCK_P": block_p, "BLOCK_N": block_n, "num_warps": 4})


def _check_triton(x, dt, B, C, states) -> None:
    _check(x, B, states)
    if states.dtype != torch.float32 or not states.is_contiguous():
        raise ValueError("mamba scan: states must be a contiguous fp32 pool")
    for name, t in (("x", x), ("B", B), ("C", C)):
        if t.stride(-1) != 1 or t.stride(-2) != t.shape[-1]:
            raise ValueError(f"mamba scan: {name} needs contiguous heads (a token's row may be a slice)")
    if dt.stride(-1) != 1:
        raise ValueError("mamba scan: dt needs a unit head stride")


def chunk_scratch_bytes(tokens: int, seqs: int, heads: int, head_dim: int, state_size: int, dtype: torch.dtype) -> int:
    """The fp32 scratch :func:`mamba_chunk_scan_launches` allocates for a step of ``tokens`` rows in ``seqs``
    sequences, inputs of ``dtype``: every chunk's starting state."""
    return 4 * max_chunks(tokens, seqs, chunk_precision(dtype)[0]) * heads * head_dim * state_size


def mamba_chunk_scan_triton(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc, has_initial_state,
                            dt_softplus: bool = True) -> torch.Tensor:
    """Triton version of :func:`mamba_chunk_scan_ref`, in chunks."""
    _check_triton(x, dt, B, C, states)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0]:
        run_all(mamba_chunk_scan_launches(x, dt, A, B, C, D, dt_bias, states, slots, query_start_loc,
                                          has_initial_state, dt_softplus, y))
    return y


def mamba_state_update_triton(x, dt, A, B, C, D, dt_bias, states, slots, dt_softplus: bool = True) -> torch.Tensor:
    """Triton version of :func:`mamba_state_update_ref`."""
    _check_triton(x, dt, B, C, states)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0]:
        mamba_decode_launch(x, dt, A, B, C, D, dt_bias, states, slots, dt_softplus, y)()
    return y
