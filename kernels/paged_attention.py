"""Attention of a variable-length batch of new tokens over the paged KV cache.

Every sequence in a step brings ``q_len`` new tokens (1 for a decode step, a chunk for prefill) and
has ``seq_len`` tokens in the cache once they are stored (its cached prefix plus the new ones).
New token ``j`` sits at position ``seq_len - q_len + j`` and attends causally to cache positions
``0 .. seq_len - q_len + j``. Decode and chunked prefill over a cached prefix are the same rule.

Two variants modern models need, both off by default:

- ``sliding_window = W > 0``: a token at position ``p`` sees only keys ``p - W < k <= p`` (transformers'
  convention: the window counts the token itself);
- ``softcap = c > 0``: scores are capped as ``c * tanh(score / c)`` after scaling and before the
  mask (Gemma 2's attention logit soft-capping);
- ``sinks``: a learned logit per query head (gpt-oss's attention sinks, float32 ``[num_heads]``)
  that joins the softmax's denominator and contributes no value, so a head can attend to nothing.

The reference below is also the CPU execution path: it gathers each sequence's blocks and calls
PyTorch's scaled_dot_product_attention, batching all decode rows into one call. Given the step's new
keys and values (``key``, ``value``), a sequence whose whole context is new in this step (a prompt
with no cached prefix, a first chunk) attends to them where they are, and its cache blocks, just
written for the steps to come, are not read back. One call per such sequence measured faster than
padding them into batched calls (the padding's copies and arithmetic cost more than the calls).

The Triton path (``paged_attention_triton``) splits the rows between two kernels on the device, by
each sequence's ``q_len``, so the host never reads the lengths:

- decode rows (``q_len == 1``): one program per (sequence, KV head, split) loads each key/value of
  its split once for the whole query group (GQA), and a second pass merges the splits
  (flash-decoding) when the launcher splits the keys;
- prefill/extend rows (``q_len > 1``): flash attention over tiles of ``BLOCK_Q`` new tokens times
  the query group, reading the paged prefix and the new tokens' own keys, causally.

Both kernels honour the variants: the window's edge is masked like the causal diagonal, and
key slices wholly before a tile's window are never read, so with a window a token costs O(window);
the cap is a tanh written with exp2; a sink joins each row's softmax once its keys are folded, and
with split decode once, in the merge, not per split. Whether each is on is a constexpr
(HAS_WINDOW, SOFTCAP, HAS_SINKS), so plain attention compiles as before; their values are runtime
arguments.

An FP8 cache (see fp8.py) is read with the layer's key and value scales, ``k_scale`` and
``v_scale`` (a cache of the compute dtype ignores them). The references dequantize the rows they
gather; the Triton kernels convert each loaded key and value to the query's dtype in registers
and apply the scales where they cost one multiply per row: the key scale joins the score scale,
the value scale the softmax's final division.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
import torch.nn.functional as F

from . import fp8
from ._triton import Launch, jit, next_power_of_2, run_all, tl
from .fp8 import e4m3_to_fp16
from .target import KernelTarget, device_target


def paged_attention_ref(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
    *,
    max_query_len: int | None = None,  # hints for the Triton launcher; the reference reads the lengths
    max_seq_len: int | None = None,
    min_query_len: int | None = None,
    sliding_window: int = 0,
    softcap: float = 0.0,
    decode: Callable | None = None,  # attention of one group of decode rows; default: decode_ref
    k_scale: float = 1.0,  # the layer's FP8 scales; unused with a cache of the compute dtype
    v_scale: float = 1.0,
    sinks: torch.Tensor | None = None,  # [num_heads] float32 sink logits, or None
    key: torch.Tensor | None = None,  # [num_tokens, num_kv_heads, head_dim]: the new tokens' keys, as stored
    value: torch.Tensor | None = None,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    q_lens = [end - start for start, end in zip(starts, starts[1:])]
    out = torch.empty_like(query)
    variant = AttentionVariant(sliding_window, softcap)
    decode = decode or decode_ref
    for group in _length_groups([i for i, n in enumerate(q_lens) if n == 1], lens):
        rows = torch.tensor([starts[i] for i in group], device=query.device)
        out[rows] = decode(query[rows], k_cache, v_cache, block_tables[group], seq_lens[group],
                           lens[group[0]], scale, **variant.kwargs(), k_scale=k_scale, v_scale=v_scale,
                           **_sink_kwargs(sinks))
    # An FP8 cache keeps the cache's rounded keys: a prompt then reads what its later decodes will.
    fresh = key is not None and value is not None and not fp8.is_fp8(k_cache)
    for i, q_len in enumerate(q_lens):
        if q_len == 1:
            continue
        rows = slice(starts[i], starts[i + 1])
        if fresh and q_len == lens[i]:  # the whole context is new this step: no cached key to read back
            k, v = key[rows], value[rows]
        else:
            k = gather_rows(k_cache, block_tables[i], lens[i], k_scale, query.dtype)
            v = gather_rows(v_cache, block_tables[i], lens[i], v_scale, query.dtype)
        out[rows] = extend_attention(query[rows], k, v, scale, variant, sinks)
    return out


def _sink_kwargs(sinks: torch.Tensor | None) -> dict:
    """Sinks as a decode function's keyword only when there are any: a decode without them keeps
    its compiled variants."""
    return {} if sinks is None else {"sinks": sinks}


@dataclass(frozen=True)
class AttentionVariant:
    """A sliding window (0: none) and a score soft-cap (0: none); see the module's docstring."""

    sliding_window: int = 0
    softcap: float = 0.0

    @property
    def active(self) -> bool:
        return bool(self.sliding_window or self.softcap)

    def kwargs(self) -> dict:
        return {"sliding_window": self.sliding_window, "softcap": self.softcap} if self.active else {}

    def visible(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """[..., q, k] bool: which keys each query sees (causal, then the window)."""
        seen = key_pos[..., None, :] <= query_pos[..., :, None]
        if self.sliding_window:
            seen &= key_pos[..., None, :] > query_pos[..., :, None] - self.sliding_window
        return seen


def _length_groups(seqs: list[int], lens: list[int], spread: float = 1.5) -> list[list[int]]:
    """Decode rows in groups of similar length, longest first: each group is padded to its
    longest, so no row reads more than ``spread`` times its own keys."""
    groups: list[list[int]] = []
    for seq in sorted(seqs, key=lambda i: -lens[i]):
        if groups and lens[groups[-1][0]] <= spread * lens[seq]:
            groups[-1].append(seq)
        else:
            groups.append([seq])
    return groups


def gather_rows(cache: torch.Tensor, block_table: torch.Tensor, num_tokens: int, scale: float,
                dtype: torch.dtype) -> torch.Tensor:
    """[..., max_blocks] block ids -> [..., num_tokens, num_kv_heads, head_dim] cache rows, as ``dtype``."""
    block_size = cache.shape[1]
    num_blocks = -(-num_tokens // block_size)
    ids = block_table[..., :num_blocks].long()
    # [..., num_blocks, block_size, kvh, d]. index_select copies whole blocks; advanced indexing
    # (cache[ids]) took 2.6x as long in bf16 on the CPU, 1.4x in fp32.
    blocks = cache.index_select(0, ids.flatten()).view(*ids.shape, *cache.shape[1:])
    return fp8.read_rows(blocks.flatten(-4, -3)[..., :num_tokens, :, :], scale, dtype)


def decode_ref(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale, sliding_window=0, softcap=0.0,
               k_scale=1.0, v_scale=1.0, sinks=None):
    # q: [batch, heads, dim]; keys padded to max_len and masked past each sequence's length.
    k = gather_rows(k_cache, block_tables, max_len, k_scale, q.dtype).transpose(1, 2)  # [batch, kvh, max_len, dim]
    v = gather_rows(v_cache, block_tables, max_len, v_scale, q.dtype).transpose(1, 2)
    lens = seq_lens[:, None].to(q.device)
    mask = AttentionVariant(sliding_window).visible(lens - 1, torch.arange(max_len, device=q.device))
    out = _sdpa(q.unsqueeze(2).to(k.dtype), k, v, mask[:, None], scale, softcap, sinks)
    return out.squeeze(2).to(q.dtype)


def extend_attention(q, k, v, scale, variant=AttentionVariant(), sinks=None):
    """Causal attention of one sequence's new tokens, in PyTorch.

    q: [q_len, heads, dim], the last q_len positions of a sequence whose keys and values are
    k: [seq_len, kv_heads, dim] and v: [seq_len, kv_heads, v_dim] (read back from the cache, the step's own
    when all are new, or expanded from a latent cache, whose values are narrower than its keys).
    Returns [q_len, heads, v_dim]."""
    q_len, seq_len = q.shape[0], k.shape[0]
    k, v = k.transpose(0, 1), v.transpose(0, 1)  # [kv_heads, seq_len, dim]
    mask = None
    if q_len != seq_len or variant.active:
        query_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        mask = variant.visible(query_pos, torch.arange(seq_len, device=q.device))
    # A batch dimension of 1: PyTorch's fused CPU kernel takes 4-D inputs only (3-D ones run the
    # unfused path, 2.4x slower for a 355-token prompt).
    out = _sdpa(q.transpose(0, 1)[None].to(k.dtype), k[None], v[None], mask, scale, variant.softcap, sinks)
    return out[0].transpose(0, 1).to(q.dtype)


def _sdpa(q, k, v, mask, scale, softcap=0.0, sinks=None):
    """[b, heads, q, dim] attention over [b, kv_heads, k, dim]; mask None means causal over equal lengths."""
    if not softcap and sinks is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale,
                                              enable_gqa=q.shape[1] != k.shape[1])
    # scaled_dot_product_attention can neither cap scores nor add a sink to its denominator: written out
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is None:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is not None:  # one more logit per head, with no value: it only lowers the other weights
        sink = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
    else:
        weights = scores.softmax(-1)
    return torch.matmul(weights, v.float()).to(q.dtype)


# ----------------------------------------------------------------------------------------------
# Triton path


_LOG2_E = 1.4426950408889634  # softmax runs in base 2 (exp2 is one instruction): scores are scaled by it
_MIN_KEYS_PER_SPLIT = 256  # a shorter split costs more in partial writes and the merge than it saves
_MAX_SPLITS = 16


@jit
def _attend(q, m, l, acc, k_ptr, v_ptr, table_ptr, start, kv_end, q_pos, window, qk_scale, cap,
            cache_stride_b, cache_stride_t, dims,
            HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
            MASKED: tl.constexpr, HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
            FP8: tl.constexpr):
    """Folds keys ``start .. start + BLOCK_N`` into the running base-2 softmax (m, l, acc) of q's rows.

    k_ptr / v_ptr point at this KV head in block 0; keys are gathered token by token through the
    block table, so BLOCK_N and the cache's block size are independent. Without MASKED every key of
    the slice must be below kv_end and visible to every row (causally and within the window).
    With FP8 the cache holds e4m3 bytes, read as 1/256 of their value (the launcher scales for it).
    """
    pos = start + tl.arange(0, BLOCK_N)
    in_range = pos < kv_end
    blocks = tl.load(table_ptr + pos // BLOCK_SIZE, mask=in_range, other=0).to(tl.int64)
    rows = (blocks * cache_stride_b + (pos % BLOCK_SIZE) * cache_stride_t)[:, None] + dims[None, :]
    kv_mask = in_range[:, None] & (dims < HEAD_DIM)[None, :]
    k = tl.load(k_ptr + rows, mask=kv_mask, other=0.0)
    if FP8:
        k = e4m3_to_fp16(k).to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    if SOFTCAP:  # cap * tanh(s), tanh(x) = 1 - 2 / (e^2x + 1): saturates to +-1 without overflow
        s = cap * (1.0 - 2.0 / (tl.exp2(s * (2.0 * 1.4426950408889634)) + 1.0))
    if MASKED:
        visible = (pos[None, :] <= q_pos[:, None]) & in_range[None, :]
        if HAS_WINDOW:
            visible &= pos[None, :] > q_pos[:, None] - window
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 1))
    shift = m_new
    if HAS_WINDOW:  # a row may have seen no key yet (all before its window): m = -inf, shifted by 0, weighs 0
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - shift[:, None])
    alpha = tl.exp2(m - shift)
    v = tl.load(v_ptr + rows, mask=kv_mask, other=0.0)
    if FP8:
        v = e4m3_to_fp16(v).to(q.dtype)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l * alpha + tl.sum(p, 1), acc


@jit
def _attend_keys(q, m, l, acc, k_ptr, v_ptr, table_ptr, start, head_end, full_end, kv_end, q_pos, window,
                 qk_scale, cap, cache_stride_b, cache_stride_t, dims,
                 HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
                 HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr, FP8: tl.constexpr):
    """Keys ``start .. kv_end`` in BLOCK_N slices: masked before ``head_end`` (the slices the window's
    edge cuts) and from ``full_end`` (the causal diagonal, the last partial slice), unmasked between.
    Without a window the first loop is not compiled (head_end == start): plain attention keeps the
    registers it had before windows existed."""
    if HAS_WINDOW:
        for first in range(start, head_end, BLOCK_N):
            m, l, acc = _attend(q, m, l, acc, k_ptr, v_ptr, table_ptr, first, kv_end, q_pos, window, qk_scale, cap,
                                cache_stride_b, cache_stride_t, dims, HEAD_DIM, BLOCK_SIZE, BLOCK_N, True, True,
                                SOFTCAP, DOT_PRECISION, FP8)
    for first in range(head_end, full_end, BLOCK_N):
        m, l, acc = _attend(q, m, l, acc, k_ptr, v_ptr, table_ptr, first, kv_end, q_pos, window, qk_scale, cap,
                            cache_stride_b, cache_stride_t, dims, HEAD_DIM, BLOCK_SIZE, BLOCK_N, False, HAS_WINDOW,
                            SOFTCAP, DOT_PRECISION, FP8)
    for first in range(full_end, kv_end, BLOCK_N):
        m, l, acc = _attend(q, m, l, acc, k_ptr, v_ptr, table_ptr, first, kv_end, q_pos, window, qk_scale, cap,
                            cache_stride_b, cache_stride_t, dims, HEAD_DIM, BLOCK_SIZE, BLOCK_N, True, HAS_WINDOW,
                            SOFTCAP, DOT_PRECISION, FP8)
    return m, l, acc


@jit
def _add_sinks(m, l, acc, sinks_ptr, heads, valid):
    """Folds each row's head's sink logit into its finished softmax (m, l, acc): it joins the
    denominator and adds no value. Rows that are not real heads get no sink."""
    sink = tl.load(sinks_ptr + heads, mask=valid, other=float("-inf")) * 1.4426950408889634
    m_new = tl.maximum(m, sink)
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - shift)
    return l * alpha + tl.exp2(sink - shift), acc * alpha[:, None]


@jit(do_not_specialize=("num_splits", "table_stride", "window"))
def _decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, part_out_ptr, part_lse_ptr,
    query_start_loc_ptr, seq_lens_ptr, block_tables_ptr, sinks_ptr,
    num_heads, group, num_splits, window, qk_scale, cap, v_scale, q_stride_t, q_stride_h, out_stride_t, out_stride_h,
    cache_stride_b, cache_stride_t, cache_stride_h, table_stride,
    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, SPLIT: tl.constexpr, HAS_WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr, FP8: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    token = tl.load(query_start_loc_ptr + seq)
    if tl.load(query_start_loc_ptr + seq + 1) - token != 1:
        return  # not a decode row: the extend kernel's
    seq_len = tl.load(seq_lens_ptr + seq)
    # The splits share the window's keys, from the slice holding its first key, in whole BLOCK_N slices.
    base = 0
    if HAS_WINDOW:
        base = tl.maximum(seq_len - window, 0) // BLOCK_N * BLOCK_N
    per_split = tl.cdiv(tl.cdiv(seq_len - base, num_splits), BLOCK_N) * BLOCK_N
    kv_start = base + split * per_split
    kv_end = tl.minimum(kv_start + per_split, seq_len)
    head_end = kv_start
    if HAS_WINDOW:  # past the slice that holds the window's first key, if this split has it
        head_end = tl.minimum(tl.maximum(tl.cdiv(seq_len - window, BLOCK_N) * BLOCK_N, kv_start), kv_end)
    full_end = head_end + tl.maximum(kv_end - head_end, 0) // BLOCK_N * BLOCK_N

    group_rows = tl.arange(0, BLOCK_H)  # the query heads that share this KV head, padded to a dot's 16
    heads = kv_head * group + group_rows
    dims = tl.arange(0, BLOCK_D)
    row_mask = (group_rows < group)[:, None] & (dims < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + token.to(tl.int64) * q_stride_t + heads[:, None] * q_stride_h + dims[None, :],
                mask=row_mask, other=0.0)
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    m, l, acc = _attend_keys(q, m, tl.zeros([BLOCK_H], tl.float32), tl.zeros([BLOCK_H, BLOCK_D], tl.float32),
                             k_cache_ptr + kv_head * cache_stride_h, v_cache_ptr + kv_head * cache_stride_h,
                             block_tables_ptr + seq.to(tl.int64) * table_stride, kv_start, head_end, full_end,
                             kv_end, tl.zeros([BLOCK_H], tl.int32) + seq_len - 1, window, qk_scale, cap,
                             cache_stride_b, cache_stride_t, dims, HEAD_DIM, BLOCK_SIZE, BLOCK_N, HAS_WINDOW,
                             SOFTCAP, DOT_PRECISION, FP8)
    if FP8:  # the value scale, once per row (the merge of splits is linear in it)
        acc = acc * v_scale
    if SPLIT:
        # An empty split (a short sequence in a long batch) stores lse = -inf and zeros: it weighs nothing.
        part = (seq.to(tl.int64) * num_heads + heads) * num_splits + split
        l_safe = tl.where(l > 0, l, 1.0)
        tl.store(part_lse_ptr + part, tl.where(l > 0, m + tl.log2(l_safe), float("-inf")), mask=group_rows < group)
        tl.store(part_out_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc / l_safe[:, None], mask=row_mask)
    else:
        if HAS_SINKS:
            l, acc = _add_sinks(m, l, acc, sinks_ptr, heads, group_rows < group)
        out = acc / l[:, None]
        tl.store(out_ptr + token.to(tl.int64) * out_stride_t + heads[:, None] * out_stride_h + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_mask)


@jit(do_not_specialize=("num_splits",))
def _merge_splits_kernel(
    part_out_ptr, part_lse_ptr, out_ptr, query_start_loc_ptr, sinks_ptr, num_splits, out_stride_t, out_stride_h,
    HEAD_DIM: tl.constexpr, BLOCK_SPLITS: tl.constexpr, BLOCK_D: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    # BLOCK_SPLITS is always _MAX_SPLITS: the sums below then have one shape whatever the split count,
    # and empty or absent splits add exact zeros, so a sequence's result does not depend on it.
    seq = tl.program_id(0)
    head = tl.program_id(1)
    token = tl.load(query_start_loc_ptr + seq)
    if tl.load(query_start_loc_ptr + seq + 1) - token != 1:
        return
    first = (seq.to(tl.int64) * tl.num_programs(1) + head) * num_splits
    splits = tl.arange(0, BLOCK_SPLITS)
    dims = tl.arange(0, BLOCK_D)
    lse = tl.load(part_lse_ptr + first + splits, mask=splits < num_splits, other=float("-inf"))
    top = tl.max(lse, 0)
    if HAS_SINKS:  # the sink joins once, here, as one more split with a logit and no value
        sink = tl.load(sinks_ptr + head) * 1.4426950408889634
        top = tl.maximum(top, sink)
    weights = tl.exp2(lse - top)
    total = tl.sum(weights, 0)
    if HAS_SINKS:
        total += tl.exp2(sink - top)
    mask = (splits < num_splits)[:, None] & (dims < HEAD_DIM)[None, :]
    parts = tl.load(part_out_ptr + (first + splits)[:, None] * HEAD_DIM + dims[None, :], mask=mask, other=0.0)
    out = tl.sum(parts * weights[:, None], 0) / total
    tl.store(out_ptr + token.to(tl.int64) * out_stride_t + head * out_stride_h + dims,
             out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)


@jit
def _tile_owner(query_start_loc_ptr, tile, num_seqs, BLOCK_Q: tl.constexpr):
    """The last sequence i whose first tile, ``query_start_loc[i] // BLOCK_Q + i``, is <= tile."""
    lo = tl.full([], 0, tl.int32)
    hi = tl.full([], 0, tl.int32) + num_seqs
    while hi - lo > 1:
        mid = (lo + hi) // 2
        starts_before = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid <= tile
        lo = tl.where(starts_before, mid, lo)
        hi = tl.where(starts_before, hi, mid)
    return lo


@jit(do_not_specialize=("num_seqs", "table_stride", "window"))
def _extend_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, query_start_loc_ptr, seq_lens_ptr, block_tables_ptr, sinks_ptr,
    num_seqs, group, window, qk_scale, cap, v_scale, q_stride_t, q_stride_h, out_stride_t, out_stride_h,
    cache_stride_b, cache_stride_t, cache_stride_h, table_stride,
    HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    GROUP_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr,
    DECODE_ROWS: tl.constexpr, FP8: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = _tile_owner(query_start_loc_ptr, tile, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_end = tl.load(query_start_loc_ptr + seq + 1)
    first = q_start + (tile - q_start // BLOCK_Q - seq) * BLOCK_Q  # this tile's first new token
    if ((q_end - q_start <= 1) & (not DECODE_ROWS)) | (first >= q_end):
        return  # a decode row (the decode kernel's) or a spare tile past the sequence's tokens
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - (q_end - q_start)  # tokens cached before this step's

    # Rows are (token, query head of the group), token-major, so one KV load serves them all.
    rows = tl.arange(0, BLOCK_Q * GROUP_PAD)
    tokens = first + rows // GROUP_PAD
    heads = kv_head * group + rows % GROUP_PAD
    dims = tl.arange(0, BLOCK_D)
    row_mask = ((tokens < q_end) & (rows % GROUP_PAD < group))[:, None] & (dims < HEAD_DIM)[None, :]
    q = tl.load(q_ptr + tokens.to(tl.int64)[:, None] * q_stride_t + heads[:, None] * q_stride_h + dims[None, :],
                mask=row_mask, other=0.0)
    first_pos = context + first - q_start
    kv_end = tl.minimum(seq_len, first_pos + BLOCK_Q)  # past the tile's last token nothing is visible
    # Keys before the first row's window are skipped; those before the last row's (kv_end - 1) are
    # masked; then keys before the tile's first token are visible to all rows; the diagonal is masked.
    full_end = first_pos // BLOCK_N * BLOCK_N
    start = 0
    head_end = 0
    if HAS_WINDOW:
        start = tl.maximum(first_pos + 1 - window, 0) // BLOCK_N * BLOCK_N
        head_end = tl.minimum(tl.cdiv(tl.maximum(kv_end - window, 0), BLOCK_N) * BLOCK_N, full_end)
    m, l, acc = _attend_keys(q, tl.full([BLOCK_Q * GROUP_PAD], float("-inf"), tl.float32),
                             tl.zeros([BLOCK_Q * GROUP_PAD], tl.float32),
                             tl.zeros([BLOCK_Q * GROUP_PAD, BLOCK_D], tl.float32),
                             k_cache_ptr + kv_head * cache_stride_h, v_cache_ptr + kv_head * cache_stride_h,
                             block_tables_ptr + seq.to(tl.int64) * table_stride, start, head_end, full_end, kv_end,
                             context + tokens - q_start, window, qk_scale, cap, cache_stride_b, cache_stride_t, dims,
                             HEAD_DIM, BLOCK_SIZE, BLOCK_N, HAS_WINDOW, SOFTCAP, DOT_PRECISION, FP8)
    if FP8:
        acc = acc * v_scale
    if HAS_SINKS:
        l, acc = _add_sinks(m, l, acc, sinks_ptr, heads, rows % GROUP_PAD < group)
    if HAS_WINDOW:  # padding rows past the sequence's last token may see no key
        l = tl.where(l > 0, l, 1.0)
    out = acc / l[:, None]
    tl.store(out_ptr + tokens.to(tl.int64)[:, None] * out_stride_t + heads[:, None] * out_stride_h + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_mask)


@dataclass(frozen=True)
class AttentionTiles:
    """The launch configuration of both attention kernels on one target."""

    block_m: int  # extend rows per program: BLOCK_Q new tokens x the padded query group
    block_n: int  # keys per inner step, in both kernels
    extend_warps: int
    decode_warps: int
    stages: int


def attention_tiles(head_dim: int, dtype: torch.dtype, target: KernelTarget, group: int = 1,
                    fp8_kv: bool = False) -> AttentionTiles:
    """A pure function of the shape, dtype and target, so the compile check builds what a GPU runs.

    Chosen with the compile check so that no variant spills registers: the extend kernel runs 8
    warps (with 4, head_dim 256 needs 255 registers per thread and spills), and 128 query rows per
    program only where they fit: head_dim 64, or up to 128 on sm_90 (on sm_80/86 head_dim 80-128
    spills with 128 rows). Then stages, keys per step and rows per program shrink until the extend
    kernel's tiles fit the target's shared memory.
    """
    if target.interpreted:  # small tiles, so short test sequences span several
        return AttentionTiles(block_m=32, block_n=32, extend_warps=4, decode_warps=4, stages=1)
    wide = head_dim <= 64 or (target.arch >= 90 and head_dim <= 128)
    # On sm_80/86, head dims 80-128 spill a few bytes in some variants (ptxas caps them at 128
    # registers) with two stages, and in the unsplit decode kernel with 4 warps; one stage and a
    # decode kernel of 8 warps do not.
    tight = target.arch < 90 and 64 < head_dim <= 128
    # There, query groups of 5-8 heads also spill with 64 rows per program (8 tokens of 8 heads),
    # windowed or not depending on the target; 32 rows do not.
    rows = 128 if wide else 32 if tight and group > 4 else 64
    block_n = 64 if head_dim <= 128 else 32
    decode_warps = 8 if tight else 4
    # Converting an FP8 cache's keys and values takes registers too (full compile matrix). On sm_80/86 the
    # extend kernel spills 8-24 bytes at head_dim 256 with 64 rows; with 32 rows, groups of 5-8 heads spill
    # with 32 keys per step and groups of 3-4 with 16, so each takes the other. At head_dim 64 it spills
    # with 64 keys per step over blocks of 32 tokens. On sm_90 the decode kernel spills 8-32 bytes past
    # head_dim 64 (padded to 128 and more) with 4 warps or 64 keys per step; 8 warps and 16 keys there,
    # which the extend kernel takes too, do not.
    if fp8_kv and target.arch < 90:
        if head_dim > 128:
            rows, block_n = 32, 16 if group > 4 else block_n
        elif head_dim <= 64:
            block_n = 32
    elif fp8_kv and head_dim > 64:
        decode_warps, block_n = 8, 16
    tiles = AttentionTiles(block_m=rows, block_n=block_n, extend_warps=8, decode_warps=decode_warps,
                           stages=1 if tight else 2)
    element = torch.tensor([], dtype=dtype).element_size()
    while extend_shared_bytes(tiles, head_dim, element) > target.shared_memory:
        if tiles.stages > 1:
            tiles = replace(tiles, stages=tiles.stages - 1)
        elif tiles.block_n > 16:
            tiles = replace(tiles, block_n=tiles.block_n // 2)
        elif tiles.block_m > 16:
            tiles = replace(tiles, block_m=tiles.block_m // 2)
        else:
            break
    return tiles


def extend_shared_bytes(tiles: AttentionTiles, head_dim: int, element: int) -> int:
    """What the extend kernel's tiles take in shared memory: the query tile, plus keys and values
    for each pipeline stage (Triton's own figure for these kernels, compiled for sm_80 and sm_90)."""
    return element * next_power_of_2(head_dim) * (tiles.block_m + 2 * tiles.stages * tiles.block_n)


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, target: KernelTarget) -> int:
    """How many slices the decode kernel cuts each sequence's keys into (a power of two).

    Enough (sequence, KV head, split) programs to give every multiprocessor about four, but no
    split shorter than _MIN_KEYS_PER_SPLIT keys: a big batch runs unsplit, a lone long sequence
    splits up to _MAX_SPLITS ways.
    """
    wanted = -(-4 * target.multiprocessors // max(1, num_seqs * num_kv_heads))
    splits = max(1, min(wanted, -(-max_seq_len // _MIN_KEYS_PER_SPLIT), _MAX_SPLITS))
    return 1 << (splits.bit_length() - 1)  # few distinct values: fewer partial buffers to size


def paged_attention_triton(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], unit stride on head_dim
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim], contiguous
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
    *,
    max_query_len: int | None = None,
    max_seq_len: int | None = None,
    min_query_len: int | None = None,
    sliding_window: int = 0,
    softcap: float = 0.0,
    num_splits: int | None = None,
    batch_invariant: bool = False,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    sinks: torch.Tensor | None = None,
    key: torch.Tensor | None = None,  # unused: the kernels read every key from the cache, where store_kv put it
    value: torch.Tensor | None = None,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Triton version of :func:`paged_attention_ref`; reads no tensor back to the host.

    The hints are optional bounds: ``max_query_len == 1`` skips the extend launch,
    ``min_query_len > 1`` the decode launch, and ``max_seq_len`` (default: the block table's capacity) sizes the split count. ``num_splits``
    overrides :func:`choose_num_splits`. With ``batch_invariant`` every row, decode rows too, runs
    through the extend kernel, whose result for a token depends on its own sequence alone: keys
    are folded in BLOCK_N slices from the window's first slice whatever the batch, the chunk or the
    split count. With a sliding window both kernels skip the key slices wholly before it, so a
    token's attention costs O(window), not O(seq_len); the split count is sized for the window.

    Decode grid ``(num_seqs, num_kv_heads, num_splits)``: a sequence, one of its KV heads, one
    slice of its (windowed) keys. Memory: each key and value of a decode sequence is read once per KV head
    (not once per query head); with splits, fp32 partial outputs ``[num_seqs, num_heads, splits,
    head_dim]`` are written and read back by the merge grid ``(num_seqs, num_heads)``.

    Extend grid ``(num_tokens // BLOCK_Q + num_seqs, num_kv_heads)``: axis 0 a tile of BLOCK_Q new
    tokens of one sequence (sequence i's tiles start at ``query_start_loc[i] // BLOCK_Q + i``, so
    the count is a bound known without reading the lengths; spare tiles exit at once), axis 1 the
    KV head whose query group the tile's rows cover. Memory: each tile reads its sequence's keys and
    values up to its last token once, plus its queries, and writes its outputs.
    """
    _check_inputs(query, k_cache, v_cache, block_tables)
    query = query if query.stride(-1) == 1 else query.contiguous()
    out = torch.empty_like(query)
    run_all(attention_launches(query, k_cache, v_cache, out, query_start_loc, seq_lens, block_tables, scale,
                               device_target(query.device), max_query_len=max_query_len,
                               max_seq_len=max_seq_len, min_query_len=min_query_len, sliding_window=sliding_window,
                               softcap=softcap, num_splits=num_splits, batch_invariant=batch_invariant,
                               k_scale=k_scale, v_scale=v_scale, sinks=sinks))
    return out


def attention_launches(query, k_cache, v_cache, out, query_start_loc, seq_lens, block_tables, scale: float,
                       target: KernelTarget, *, max_query_len: int | None = None, max_seq_len: int | None = None,
                       min_query_len: int | None = None, sliding_window: int = 0, softcap: float = 0.0,
                       num_splits: int | None = None, batch_invariant: bool = False, k_scale: float = 1.0,
                       v_scale: float = 1.0, sinks: torch.Tensor | None = None) -> list[Launch]:
    """The launches that compute ``out``, for ``target``; allocates the split buffers, runs nothing."""
    num_tokens, num_heads, head_dim = query.shape
    num_seqs, num_kv_heads, block_size = seq_lens.shape[0], k_cache.shape[2], k_cache.shape[1]
    if num_tokens == 0 or num_seqs == 0:
        return []
    kv_fp8 = fp8.is_fp8(k_cache)
    tiles = attention_tiles(head_dim, query.dtype, target, num_heads // num_kv_heads, kv_fp8)
    if kv_fp8:  # the kernels read e4m3 as 1/FP16_SHIFT of its value
        scale, v_scale = scale * k_scale * fp8.FP16_SHIFT, v_scale * fp8.FP16_SHIFT
    sinks = None if sinks is None else sinks.float().contiguous()  # None: the kernels never read it
    args = (query, fp8.kernel_view(k_cache), fp8.kernel_view(v_cache), out, query_start_loc, seq_lens, block_tables,
            sinks)
    strides = (*_score_args(scale, sliding_window, softcap), float(v_scale), query.stride(0), query.stride(1),
               out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
               block_tables.stride(0))
    shape = {"HEAD_DIM": head_dim, "BLOCK_SIZE": block_size, "BLOCK_N": tiles.block_n,
             "HAS_WINDOW": sliding_window > 0, "SOFTCAP": softcap > 0,
             "BLOCK_D": next_power_of_2(head_dim), "DOT_PRECISION": "ieee" if query.dtype == torch.float32 else "tf32",
             "FP8": kv_fp8, "HAS_SINKS": sinks is not None}
    group = num_heads // num_kv_heads
    launches = []
    if batch_invariant or max_query_len is None or max_query_len > 1:
        group_pad = next_power_of_2(group)
        block_q = max(1, tiles.block_m // group_pad)
        launches.append(Launch(_extend_kernel, (num_tokens // block_q + num_seqs, num_kv_heads),
                               (*args, num_seqs, group, *strides),
                               dict(shape, BLOCK_Q=block_q, GROUP_PAD=group_pad, DECODE_ROWS=batch_invariant,
                                    num_warps=tiles.extend_warps, num_stages=tiles.stages)))
    if batch_invariant or (min_query_len is not None and min_query_len > 1):
        return launches
    if num_splits is None:
        bound = max_seq_len if max_seq_len is not None else block_tables.shape[1] * block_size
        bound = min(bound, sliding_window + tiles.block_n) if sliding_window else bound  # the keys a row reads
        num_splits = choose_num_splits(num_seqs, num_kv_heads, bound, target)
    parts = lse = out  # placeholders: an unsplit launch writes the output directly
    if num_splits > 1:
        parts = out.new_empty((num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32)
        lse = out.new_empty((num_seqs, num_heads, num_splits), dtype=torch.float32)
    launches.append(Launch(_decode_kernel, (num_seqs, num_kv_heads, num_splits),
                           (*args[:4], parts, lse, *args[4:], num_heads, group, num_splits, *strides),
                           dict(shape, SPLIT=num_splits > 1, BLOCK_H=max(16, next_power_of_2(group)),
                                num_warps=tiles.decode_warps, num_stages=tiles.stages)))
    if num_splits > 1:
        launches.append(Launch(_merge_splits_kernel, (num_seqs, num_heads),
                               (parts, lse, out, query_start_loc, sinks, num_splits, out.stride(0), out.stride(1)),
                               {"HEAD_DIM": head_dim, "BLOCK_SPLITS": _MAX_SPLITS, "BLOCK_D": shape["BLOCK_D"],
                                "HAS_SINKS": sinks is not None}))
    return launches


def _score_args(scale: float, sliding_window: int, softcap: float) -> tuple[int, float, float]:
    """The kernels' (window, qk_scale, cap), the last two turning q.k into base-2 softmax scores:
    ``s * qk_scale``, or with a cap ``cap * tanh(s * qk_scale)``."""
    if sliding_window < 0 or softcap < 0:
        raise ValueError(f"sliding_window ({sliding_window}) and softcap ({softcap}) must be >= 0 (0: off)")
    if softcap:
        return sliding_window, scale / softcap, softcap * _LOG2_E
    return sliding_window, scale * _LOG2_E, 0.0


def _check_inputs(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor) -> None:
    num_heads, head_dim = query.shape[1:]
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != head_dim or num_heads % k_cache.shape[2]:
        raise ValueError(f"query {tuple(query.shape)} does not fit the KV cache {tuple(k_cache.shape)} / "
                         f"{tuple(v_cache.shape)}: head sizes must match and heads divide by KV heads")
    if k_cache.dtype != v_cache.dtype or not (fp8.is_fp8(k_cache) or query.dtype == k_cache.dtype):
        raise ValueError(f"query and KV cache dtypes differ: {query.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous() and block_tables.stride(-1) == 1):
        raise ValueError("the KV cache must be contiguous and block_tables rows unit-strided")
