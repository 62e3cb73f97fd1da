"""The gated delta rule: the linear attention of Qwen3-Next's and Qwen3.5's gated delta-net layers.

Each head keeps a fixed-size state S [Dk, Dv] (fp32, one slot of the pool ``states`` [S, H, Dk, Dv]).
Per token, with decay ``g`` (log space) and learning rate ``beta``::

    S = exp(g) * S;   S += k ⊗ beta * (v - k @ S);   o = scale * q @ S

``q`` and ``k`` arrive l2-normalised. Where v has more heads than q and k (grouped value attention,
as in Qwen3-Next), the caller repeats q and k to v's heads before the call.

- ``*_ref``: per token, the tests' ground truth (it matches transformers'
  ``torch_recurrent_gated_delta_rule`` / ``torch_chunk_gated_delta_rule``).
- CPU: prefill in chunks of 64 tokens (the UT transform: a triangular solve turns a chunk's 64
  rank-one updates into matrix products), per sequence with all heads batched; decode is one batched
  step over all sequences (in blocks of at most 8 MiB of state, kernels/state_blocks.py).
- Triton, prefill (:func:`chunk_gated_delta_rule_triton`): the same chunk form on the GPU, in three
  launches (the chunk-local UT transform, the state's walk over chunks, the output; see the Triton
  section), parallel over chunks except for the state's walk, which is sequential over a sequence's
  chunks rather than its tokens.
- Triton, decode (:func:`fused_recurrent_gated_delta_rule_update_triton`): one launch applies each
  sequence's one token to its state, a program per (sequence, head, block of Dv) with its tile of S in
  registers: with one token there is nothing to chunk.
"""

from __future__ import annotations

import torch

from ._triton import Launch, jit, next_power_of_2, run_all, tl
from .chunk_layout import (causal_decay, chunk_layout, chunk_precision, chunk_rows, dot_tile, load_chunk_rows,
                           max_chunks, store_chunk_rows)
from .state_blocks import state_blocks

CHUNK = 64


def _check(q: torch.Tensor, v: torch.Tensor, states: torch.Tensor) -> None:
    heads, dk, dv = states.shape[1:]
    if q.shape[-2:] != (heads, dk) or v.shape[-2:] != (heads, dv):
        raise ValueError(f"gated delta rule: q {tuple(q.shape)}, v {tuple(v.shape)} and states {tuple(states.shape)} "
                         "disagree (want q [T, H, Dk], v [T, H, Dv], states [S, H, Dk, Dv]; repeat q and k to "
                         "v's heads first)")


def _initial(states: torch.Tensor, slot: int, has_initial_state: bool) -> torch.Tensor:
    state = states[slot].float()
    return state if has_initial_state else torch.zeros_like(state)


def _recurrent_steps(q, k, v, g, beta, state, scale) -> torch.Tensor:
    """Tokens one at a time (q, k [L, H, Dk] ...; state [H, Dk, Dv] fp32, updated in place) -> o [L, H, Dv] fp32."""
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for t in range(q.shape[0]):
        state.mul_(g[t].float().exp()[:, None, None])
        kt = k[t].float()
        delta = (v[t].float() - torch.einsum("hk,hkv->hv", kt, state)) * beta[t].float()[:, None]
        state.baddbmm_(kt[:, :, None], delta[:, None, :])  # the rank-one update without a state-sized temporary
        out[t] = torch.einsum("hk,hkv->hv", q[t].float() * scale, state)
    return out


def chunk_gated_delta_rule_ref(q, k, v, g, beta, states, slots, query_start_loc, has_initial_state,
                               scale: float) -> torch.Tensor:
    """Per token and per sequence: the ground truth of :func:`chunk_gated_delta_rule`."""
    _check(q, v, states)
    return _each_sequence(_recurrent_steps, q, k, v, g, beta, states, slots, query_start_loc, has_initial_state,
                          scale)


def fused_recurrent_gated_delta_rule_update_ref(q, k, v, g, beta, states, slots, scale: float) -> torch.Tensor:
    count = q.shape[0]
    return chunk_gated_delta_rule_ref(q, k, v, g, beta, states, slots, _one_token_each(count, q.device),
                                      torch.ones(count, dtype=torch.bool, device=q.device), scale)


def _one_token_each(count: int, device: torch.device) -> torch.Tensor:
    return torch.arange(count + 1, dtype=torch.int32, device=device)


# --- the CPU path ----------------------------------------------------------------------------------


def _chunked(x: torch.Tensor, length: int) -> torch.Tensor:
    """[L, H, ...] -> fp32 [H, chunks, 64, ...], zero-padded: a padded token leaves the state as it is."""
    x = x.float().movedim(1, 0)
    pad = -length % CHUNK
    x = torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], dim=1)
    return x.view(x.shape[0], -1, CHUNK, *x.shape[2:])


def _chunk_form(q, k, v, g, beta, state, scale) -> torch.Tensor:
    """One sequence in chunks of 64, all heads at once (state [H, Dk, Dv] fp32, updated in place) -> [L, H, Dv]."""
    length = q.shape[0]
    q, k, v, g, beta = (_chunked(x, length) for x in (q, k, v, g, beta))
    cum = g.cumsum(-1)  # [H, N, C]: log decay from the chunk's start through each token
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~causal, float("-inf")).exp()  # token j -> i
    k_beta = k * beta[..., None]
    # The UT transform: (I + strictly_lower(k_beta k^T * decay)) maps each token's corrected value
    # and decayed key to what the sequential updates would have written.
    system = (k_beta @ k.transpose(-1, -2) * decay).tril(-1) + torch.eye(CHUNK, device=q.device)
    values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    keys_read = torch.linalg.solve_triangular(system, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    attention = q @ k.transpose(-1, -2) * decay * scale
    q_decayed = q * (cum.exp()[..., None] * scale)
    k_to_end = k * (cum[..., -1:] - cum).exp()[..., None]
    out = torch.empty_like(values)
    for c in range(q.shape[1]):
        corrected = values[:, c] - keys_read[:, c] @ state
        out[:, c] = q_decayed[:, c] @ state + attention[:, c] @ corrected
        state.mul_(cum[:, c, -1].exp()[:, None, None]).add_(k_to_end[:, c].transpose(-1, -2) @ corrected)
    return out.flatten(1, 2)[:, :length].movedim(0, 1)


# --- what the layers call ----------------------------------------------------------------------------


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                           states: torch.Tensor, slots: torch.Tensor, query_start_loc: torch.Tensor,
                           has_initial_state: torch.Tensor, scale: float) -> torch.Tensor:
    """A step's prefill tokens (q, k [T, H, Dk]; v [T, H, Dv]; g, beta [T, H]) -> o [T, H, Dv];
    each sequence starts from ``states[slot]`` when ``has_initial_state`` (else zeros) and its
    final state is written there. Triton on CUDA; on the CPU the chunk form, one sequence at a time."""
    _check(q, v, states)
    if q.device.type == "cuda":
        return chunk_gated_delta_rule_triton(q, k, v, g, beta, states, slots, query_start_loc, has_initial_state,
                                             scale)
    return _each_sequence(_chunk_form, q, k, v, g, beta, states, slots, query_start_loc, has_initial_state, scale)


def _each_sequence(form, q, k, v, g, beta, states, slots, query_start_loc, has_initial_state, scale) -> torch.Tensor:
    """`form` (token by token, or in chunks) over each sequence's tokens from its slot's state (or zeros), the
    final state written back to the slot."""
    out = torch.empty_like(v)
    bounds = query_start_loc.tolist()
    for seq, (slot, initial) in enumerate(zip(slots.tolist(), has_initial_state.tolist())):
        span = slice(bounds[seq], bounds[seq + 1])
        state = _initial(states, slot, initial)
        out[span] = form(q[span], k[span], v[span], g[span], beta[span], state, scale).to(v.dtype)
        states[slot] = state
    return out


def fused_recurrent_gated_delta_rule_update(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                                            beta: torch.Tensor, states: torch.Tensor, slots: torch.Tensor,
                                            scale: float) -> torch.Tensor:  # q, k [B, H, Dk]; v [B, H, Dv]
    """One decode token per sequence, all sequences in one batched step; states updated in place."""
    _check(q, v, states)
    if q.device.type == "cuda":
        return fused_recurrent_gated_delta_rule_update_triton(q, k, v, g, beta, states, slots, scale)
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for block in state_blocks(q.shape[0], states[0].numel() * states.element_size()):
        state = states[slots[block]]  # [b, H, Dk, Dv] fp32, a copy
        # One token of b * H independent heads: the block folds into the head axis.
        heads = state.shape[0] * state.shape[1]
        out[block] = _recurrent_steps(q[block].reshape(1, heads, -1), k[block].reshape(1, heads, -1),
                                      v[block].reshape(1, heads, -1), g[block].reshape(1, heads),
                                      beta[block].reshape(1, heads), state.view(heads, *state.shape[2:]),
                                      scale).view(state.shape[0], state.shape[1], -1)
        states[slots[block]] = state
    return out.view(v.shape).to(v.dtype)


# --- Triton --------------------------------------------------------------------------------------------
#
# Prefill runs in chunks of CHUNK tokens, in three launches over a step's chunks (kernels/chunk_layout.py):
#   1. per (chunk, head): the UT transform. The chunk's system I + strictly_lower(beta k k^T * decay) is
#      inverted by forward substitution, giving w (the decayed keys that read the chunk's starting state)
#      and u (the values before that read): fp32 rows of the step's size.
#   2. per (sequence, head, block of Dv): the state walks the sequence's chunks, not its tokens. At each
#      chunk it is saved (the output's starting state), u becomes the corrected values u - w @ S, and the
#      chunk's updates are applied as one product.
#   3. per (chunk, head, block of Dv): the output, q @ (the chunk's starting state) plus the chunk's
#      causal attention over the corrected values.
# Decode (one token per sequence) is one launch that applies the token to each state tile in registers.


@jit
def _delta_transform_kernel(k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, starts_ptr, ends_ptr, heads, dk, dv,
                            k_stride, v_stride, g_stride, beta_stride, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
                            BLOCK_V: tl.constexpr, DOT: tl.constexpr):
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    rows, row_mask, _ = chunk_rows(starts_ptr, ends_ptr, chunk, CHUNK)
    g = tl.load(g_ptr + rows * g_stride + head, mask=row_mask, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + rows * beta_stride + head, mask=row_mask, other=0.0).to(tl.float32)
    cum = tl.cumsum(g, 0)  # log decay from the chunk's start through each token
    gram = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
    for col in range(0, dk, BLOCK_K):
        k = load_chunk_rows(k_ptr, rows, row_mask, k_stride, head * dk, col, dk, BLOCK_K)
        gram += tl.dot(k, tl.trans(k), input_precision=DOT)
    system = gram * beta[:, None] * causal_decay(cum, CHUNK, True)
    index = tl.arange(0, CHUNK)
    # (I + L)^-1 - I, row by row: row r is -L[r] - sum_{j<r} L[r, j] * (row j).
    inverse = -system
    for r in range(1, CHUNK):
        row = -tl.sum(tl.where(index[:, None] == r, system, 0.0), 0)
        row += tl.sum(row[:, None] * inverse, 0)
        inverse = tl.where(index[:, None] == r, row[None, :], inverse)
    inverse += tl.where(index[:, None] == index[None, :], 1.0, 0.0)
    for col in range(0, dk, BLOCK_K):
        k = load_chunk_rows(k_ptr, rows, row_mask, k_stride, head * dk, col, dk, BLOCK_K)
        w = tl.dot(inverse, k * (beta * tl.exp(cum))[:, None], input_precision=DOT)
        store_chunk_rows(w_ptr, w, rows, row_mask, heads, head, col, dk, BLOCK_K)
    for col in range(0, dv, BLOCK_V):
        v = load_chunk_rows(v_ptr, rows, row_mask, v_stride, head * dv, col, dv, BLOCK_V)
        u = tl.dot(inverse, v * beta[:, None], input_precision=DOT)
        store_chunk_rows(u_ptr, u, rows, row_mask, heads, head, col, dv, BLOCK_V)


@jit
def _delta_state_kernel(k_ptr, g_ptr, w_ptr, u_ptr, states_ptr, chunk_states_ptr, slots_ptr, qsl_ptr, has_init_ptr,
                        first_chunk_ptr, heads, dk, dv, k_stride, g_stride, CHUNK: tl.constexpr,
                        BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, DOT: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    col = tl.program_id(2) * BLOCK_V
    start = tl.load(qsl_ptr + seq).to(tl.int64)
    end = tl.load(qsl_ptr + seq + 1).to(tl.int64)
    first = tl.load(first_chunk_ptr + seq).to(tl.int64)
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    dims = tl.arange(0, BLOCK_K)
    cols = col + tl.arange(0, BLOCK_V)
    tile_mask = (dims < dk)[:, None] & (cols < dv)[None, :]
    tile = (head * dk + dims[:, None]) * dv + cols[None, :]  # a head's [Dk, BLOCK_V] tile of a [H, Dk, Dv] state
    state = tl.load(states_ptr + slot * heads * dk * dv + tile, mask=tile_mask, other=0.0)
    state = tl.where(tl.load(has_init_ptr + seq) != 0, state, 0.0)  # a new sequence ignores the slot's leftovers
    for c in range(tl.cdiv(end - start, CHUNK)):
        tl.store(chunk_states_ptr + (first + c) * heads * dk * dv + tile, state, mask=tile_mask)
        rows = start + c * CHUNK + tl.arange(0, CHUNK)
        row_mask = rows < end
        g = tl.load(g_ptr + rows * g_stride + head, mask=row_mask, other=0.0).to(tl.float32)
        cum = tl.cumsum(g, 0)
        total = tl.sum(g, 0)
        w = load_chunk_rows(w_ptr, rows, row_mask, heads * dk, head * dk, 0, dk, BLOCK_K)
        corrected = load_chunk_rows(u_ptr, rows, row_mask, heads * dv, head * dv, col, dv, BLOCK_V)
        corrected -= tl.dot(w, state, input_precision=DOT)
        store_chunk_rows(u_ptr, corrected, rows, row_mask, heads, head, col, dv, BLOCK_V)
        k = load_chunk_rows(k_ptr, rows, row_mask, k_stride, head * dk, 0, dk, BLOCK_K)
        k_to_end = k * tl.exp(total - cum)[:, None]
        state = state * tl.exp(total) + tl.dot(tl.trans(k_to_end), corrected, input_precision=DOT)
    tl.store(states_ptr + slot * heads * dk * dv + tile, state, mask=tile_mask)


@jit
def _delta_output_kernel(q_ptr, k_ptr, g_ptr, u_ptr, chunk_states_ptr, out_ptr, starts_ptr, ends_ptr, scale, heads,
                         dk, dv, q_stride, k_stride, g_stride, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_V: tl.constexpr, DOT: tl.constexpr):
    chunk = tl.program_id(0).to(tl.int64)  # the scratch of starting states passes 2**31 values in long steps
    head = tl.program_id(1)
    col = tl.program_id(2) * BLOCK_V
    rows, row_mask, filled = chunk_rows(starts_ptr, ends_ptr, chunk, CHUNK)
    state_rows = tl.where(filled, dk, 0)
    cum = tl.cumsum(tl.load(g_ptr + rows * g_stride + head, mask=row_mask, other=0.0).to(tl.float32), 0)
    cols = col + tl.arange(0, BLOCK_V)
    from_state = tl.zeros((CHUNK, BLOCK_V), dtype=tl.float32)
    scores = tl.zeros((CHUNK, CHUNK), dtype=tl.float32)
    for dim in range(0, dk, BLOCK_K):
        q = load_chunk_rows(q_ptr, rows, row_mask, q_stride, head * dk, dim, dk, BLOCK_K)
        k = load_chunk_rows(k_ptr, rows, row_mask, k_stride, head * dk, dim, dk, BLOCK_K)
        dims = dim + tl.arange(0, BLOCK_K)
        state = tl.load(chunk_states_ptr + ((chunk * heads + head) * dk + dims[:, None]) * dv + cols[None, :],
                        mask=(dims < state_rows)[:, None] & (cols < dv)[None, :], other=0.0)
        from_state += tl.dot(q, state, input_precision=DOT)
        scores += tl.dot(q, tl.trans(k), input_precision=DOT)
    scores *= causal_decay(cum, CHUNK, False)
    corrected = load_chunk_rows(u_ptr, rows, row_mask, heads * dv, head * dv, col, dv, BLOCK_V)
    out = (from_state * tl.exp(cum)[:, None] + tl.dot(scores, corrected, input_precision=DOT)) * scale
    store_chunk_rows(out_ptr, out, rows, row_mask, heads, head, col, dv, BLOCK_V)


_BLOCK_K = 64  # columns of k, q or v a chunk's products take at a time


def chunk_gated_delta_rule_launches(q, k, v, g, beta, states, slots, query_start_loc, has_initial_state,
                                    scale: float, out: torch.Tensor) -> list[Launch]:
    """The transform, the state walk and the output (see above). Grids: ``(chunks, H)``,
    ``(B, H, cdiv(Dv, BLOCK_V))`` and ``(chunks, H, cdiv(Dv, BLOCK_V))``, where ``chunks`` bounds the
    step's chunks. Scratch, all fp32: w [T, H, Dk], u [T, H, Dv] (corrected in place by the walk) and
    each chunk's starting state [chunks, H, Dk, Dv]."""
    heads, dk, dv = states.shape[1:]
    tokens = q.shape[0]
    chunk, precision = chunk_precision(v.dtype)
    layout = chunk_layout(query_start_loc, tokens, chunk)
    w = torch.empty(tokens, heads, dk, dtype=torch.float32, device=q.device)
    u = torch.empty(tokens, heads, dv, dtype=torch.float32, device=q.device)
    chunk_states = torch.empty(layout.bound, heads, dk, dv, dtype=torch.float32, device=q.device)
    has_init = has_initial_state.to(torch.int8) if has_initial_state.dtype == torch.bool else has_initial_state
    # The state walk holds a [Dk, block_v] fp32 tile of the state: 32 columns, 16 for fp32 products.
    block_k, block_v = dot_tile(dk), min(dot_tile(dv), 32 if precision == "tf32" else 16)
    tiles = {"CHUNK": chunk, "DOT": precision, "num_warps": 8}
    return [
        Launch(_delta_transform_kernel, (layout.bound, heads),
               (k, v, g, beta, w, u, layout.starts, layout.ends, heads, dk, dv, k.stride(0), v.stride(0),
                g.stride(0), beta.stride(0)),
               {**tiles, "BLOCK_K": min(block_k, _BLOCK_K), "BLOCK_V": min(dot_tile(dv), _BLOCK_K)}),
        Launch(_delta_state_kernel, (slots.shape[0], heads, -(-dv // block_v)),
               (k, g, w, u, states, chunk_states, slots, query_start_loc, has_init, layout.first_chunk, heads, dk,
                dv, k.stride(0), g.stride(0)),
               {**tiles, "BLOCK_K": block_k, "BLOCK_V": block_v}),
        Launch(_delta_output_kernel, (layout.bound, heads, -(-dv // block_v)),
               (q, k, g, u, chunk_states, out, layout.starts, layout.ends, scale, heads, dk, dv, q.stride(0),
                k.stride(0), g.stride(0)),
               {**tiles, "BLOCK_K": min(block_k, _BLOCK_K), "BLOCK_V": block_v}),
    ]


@jit
def _delta_decode_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, states_ptr, out_ptr, slots_ptr, scale, heads, dk,
                         dv, q_stride, k_stride, v_stride, g_stride, beta_stride, BLOCK_K: tl.constexpr,
                         BLOCK_V: tl.constexpr):
    seq = tl.program_id(0)  # also the token's row: one token per sequence
    head = tl.program_id(1)
    cols = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    dims = tl.arange(0, BLOCK_K)
    dim_mask, col_mask = dims < dk, cols < dv
    slot = tl.load(slots_ptr + seq).to(tl.int64)
    state_ptrs = states_ptr + ((slot * heads + head) * dk + dims[:, None]) * dv + cols[None, :]
    tile_mask = dim_mask[:, None] & col_mask[None, :]
    state = tl.load(state_ptrs, mask=tile_mask, other=0.0)  # [BLOCK_K, BLOCK_V] fp32
    k = tl.load(k_ptr + seq * k_stride + head * dk + dims, mask=dim_mask, other=0.0).to(tl.float32)
    q = tl.load(q_ptr + seq * q_stride + head * dk + dims, mask=dim_mask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + seq * v_stride + head * dv + cols, mask=col_mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + seq * g_stride + head).to(tl.float32)
    beta = tl.load(beta_ptr + seq * beta_stride + head).to(tl.float32)
    state *= tl.exp(g)
    delta = (v - tl.sum(state * k[:, None], axis=0)) * beta
    state += k[:, None] * delta[None, :]
    out = tl.sum(state * q[:, None], axis=0) * scale
    tl.store(out_ptr + (seq * heads + head) * dv + cols, out.to(out_ptr.dtype.element_ty), mask=col_mask)
    tl.store(state_ptrs, state, mask=tile_mask)


def delta_decode_launch(q, k, v, g, beta, states, slots, scale: float, out: torch.Tensor) -> Launch:
    """Grid ``(B, H, cdiv(Dv, BLOCK_V))``: a sequence, a head, a block of the state's columns (at most
    4,096 fp32, in registers). Reads and writes each state once."""
    heads, dk, dv = states.shape[1:]
    block_k = next_power_of_2(dk)
    block_v = min(next_power_of_2(dv), max(16, 4096 // block_k))
    return Launch(_delta_decode_kernel, (slots.shape[0], heads, -(-dv // block_v)),
                  (q, k, v, g, beta, states, out, slots, scale, heads, dk, dv, q.stride(0), k.stride(0),
                   v.stride(0), g.stride(0), beta.stride(0)),
                  {"BLOCK_K": block_k, "BLOCK_V": block_v, "num_warps": 4})


def _check_triton(q, k, v, g, beta, states) -> None:
    _check(q, v, states)
    if states.dtype != torch.float32 or not states.is_contiguous():
        raise ValueError("gated delta rule: states must be a contiguous fp32 pool")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.stride(-1) != 1 or x.stride(-2) != x.shape[-1]:
            raise ValueError(f"gated delta rule: {name} needs contiguous heads (a token's row may be a slice)")
    if g.stride(-1) != 1 or beta.stride(-1) != 1:
        raise ValueError("gated delta rule: g and beta need a unit head stride")


def chunk_scratch_bytes(tokens: int, seqs: int, heads: int, key_dim: int, value_dim: int, dtype: torch.dtype) -> int:
    """The fp32 scratch :func:`chunk_gated_delta_rule_launches` allocates for a step of ``tokens`` rows in ``seqs``
    sequences, inputs of ``dtype``: w, u and every chunk's starting state."""
    chunks = max_chunks(tokens, seqs, chunk_precision(dtype)[0])
    return 4 * heads * (tokens * (key_dim + value_dim) + chunks * key_dim * value_dim)


def chunk_gated_delta_rule_triton(q, k, v, g, beta, states, slots, query_start_loc, has_initial_state,
                                  scale: float) -> torch.Tensor:
    """Triton version of :func:`chunk_gated_delta_rule_ref`, in chunks."""
    _check_triton(q, k, v, g, beta, states)
    out = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.shape[0]:
        run_all(chunk_gated_delta_rule_launches(q, k, v, g, beta, states, slots, query_start_loc, has_initial_state,
                                                scale, out))
    return out


def fused_recurrent_gated_delta_rule_update_triton(q, k, v, g, beta, states, slots, scale: float) -> torch.Tensor:
    """Triton version of :func:`fused_recurrent_gated_delta_rule_update_ref`."""
    _check_triton(q, k, v, g, beta, states)
    out = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.shape[0]:
        delta_decode_launch(q, k, v, g, beta, states, slots, scale, out)()
    return out
