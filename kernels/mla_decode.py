"""Decode attention of multi-head latent attention (DeepSeek-V2/V3, Kimi K2) in its absorbed form.

MLA caches one row per token, shared by every head: the compressed latent ``c`` (``kv_lora_rank``
values) followed by the rotary key ``k_r`` (``qk_rope_head_dim`` values). Expanding the latent into
each head's keys and values at every decode step would read ``heads x (qk_head_dim + v_head_dim)``
values per cached token. The absorbed form carries the query into the latent space instead: each
head's no-rotary query times kv_b's key block for that head gives a ``kv_lora_rank``-wide query, so

    score(head, token) = (q_latent . c + q_rope . k_r) * scale
    out_latent(head)   = sum over tokens of softmax(score) * c

is attention with one key/value head shared by all query heads, whose keys are the whole row and
whose values are its latent part. The caller projects ``out_latent`` through kv_b's value block.

Cache layout: ``[num_blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim]``, the paged layout
with one KV head, so store_kv writes it. A query is ``[num_seqs, num_heads, kv_lora_rank +
qk_rope_head_dim]``: one decode token per sequence, its latent part first.

The reference below is the CPU path. The Triton kernel runs one program per (sequence, block of
BLOCK_H heads, split of the keys): each cached row is loaded once for the whole head block, the
scores are two dots (latent and rotary parts, so neither is padded to the other's width), and the
splits are merged by paged_attention.py's merge kernel (flash-decoding).
"""

from __future__ import annotations

import torch

from ._triton import Launch, jit, next_power_of_2, run_all, tl
from .paged_attention import _LOG2_E, _MAX_SPLITS, _merge_splits_kernel, choose_num_splits, gather_rows
from .target import KernelTarget, device_target

_BLOCK_H = 16  # query heads per program: the smallest row count of a tensor-core dot


def mla_decode_ref(
    query: torch.Tensor,  # [num_seqs, num_heads, latent_dim + rope_dim]
    latent_cache: torch.Tensor,  # [num_blocks, block_size, 1, latent_dim + rope_dim]
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
    latent_dim: int,
    *,
    max_seq_len: int | None = None,  # a hint for the Triton launcher; the reference reads the lengths
) -> torch.Tensor:  # [num_seqs, num_heads, latent_dim]
    max_len = int(seq_lens.max())
    rows = gather_rows(latent_cache, block_tables, max_len, 1.0, query.dtype)[:, :, 0].float()  # [seqs, max_len, D]
    scores = torch.einsum("shd,std->sht", query.float(), rows) * scale
    past_end = torch.arange(max_len, device=query.device)[None, :] >= seq_lens[:, None].to(query.device)
    weights = scores.masked_fill(past_end[:, None, :], float("-inf")).softmax(-1)
    return torch.einsum("sht,stl->shl", weights, rows[..., :latent_dim]).to(query.dtype)


@jit(do_not_specialize=("num_splits", "table_stride"))
def _mla_decode_kernel(
    q_ptr, cache_ptr, out_ptr, part_out_ptr, part_lse_ptr, seq_lens_ptr, block_tables_ptr,
    num_heads, num_splits, qk_scale, q_stride_t, q_stride_h, out_stride_t, out_stride_h,
    cache_stride_b, cache_stride_t, table_stride,
    LATENT_DIM: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    per_split = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    kv_start = split * per_split
    kv_end = tl.minimum(kv_start + per_split, seq_len)

    latent = tl.arange(0, BLOCK_L)
    rope = tl.arange(0, BLOCK_R)
    latent_mask = (heads < num_heads)[:, None] & (latent < LATENT_DIM)[None, :]
    q_rows = q_ptr + seq.to(tl.int64) * q_stride_t + heads[:, None] * q_stride_h
    q_latent = tl.load(q_rows + latent[None, :], mask=latent_mask, other=0.0)
    q_rope = tl.load(q_rows + LATENT_DIM + rope[None, :], mask=(heads < num_heads)[:, None]
                     & (rope < ROPE_DIM)[None, :], other=0.0)
    table = block_tables_ptr + seq.to(tl.int64) * table_stride
    m = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_L], tl.float32)
    for start in range(kv_start, kv_end, BLOCK_N):
        pos = start + tl.arange(0, BLOCK_N)
        in_range = pos < kv_end
        blocks = tl.load(table + pos // BLOCK_SIZE, mask=in_range, other=0).to(tl.int64)
        rows = cache_ptr + (blocks * cache_stride_b + (pos % BLOCK_SIZE) * cache_stride_t)[:, None]
        c = tl.load(rows + latent[None, :], mask=in_range[:, None] & (latent < LATENT_DIM)[None, :], other=0.0)
        k_rope = tl.load(rows + LATENT_DIM + rope[None, :], mask=in_range[:, None] & (rope < ROPE_DIM)[None, :],
                         other=0.0)
        s = tl.dot(q_latent, tl.trans(c), input_precision=DOT_PRECISION)
        s = (s + tl.dot(q_rope, tl.trans(k_rope), input_precision=DOT_PRECISION)) * qk_scale
        s = tl.where(in_range[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c, input_precision=DOT_PRECISION)
        l = l * alpha + tl.sum(p, 1)
        m = m_new
    if SPLIT:  # an empty split stores lse = -inf and zeros: the merge weighs it nothing
        part = (seq.to(tl.int64) * num_heads + heads) * num_splits + split
        l_safe = tl.where(l > 0, l, 1.0)
        tl.store(part_lse_ptr + part, tl.where(l > 0, m + tl.log2(l_safe), float("-inf")), mask=heads < num_heads)
        tl.store(part_out_ptr + part[:, None] * LATENT_DIM + latent[None, :], acc / l_safe[:, None], mask=latent_mask)
    else:
        out_rows = out_ptr + seq.to(tl.int64) * out_stride_t + heads[:, None] * out_stride_h + latent[None, :]
        tl.store(out_rows, (acc / l[:, None]).to(out_ptr.dtype.element_ty), mask=latent_mask)


def mla_decode_tiles(latent_dim: int, target: KernelTarget) -> tuple[int, int]:
    """(keys per step, warps): a pure function of the latent width and the target, so the compile check
    builds what a GPU runs. The [BLOCK_H, latent] accumulator and a [keys, latent] tile of the cache
    live in registers: at DeepSeek's 512-wide latent, 8 warps and 16 keys per step keep them there."""
    if target.interpreted:  # small slices, so short test sequences span several
        return 16, 4
    return (16, 8) if latent_dim > 256 else (32, 4)


def mla_decode_launches(query: torch.Tensor, latent_cache: torch.Tensor, out: torch.Tensor, seq_lens: torch.Tensor,
                        block_tables: torch.Tensor, scale: float, latent_dim: int, target: KernelTarget,
                        max_seq_len: int | None = None, num_splits: int | None = None) -> list[Launch]:
    """The launches that compute ``out``, for ``target``; allocates the split buffers, runs nothing."""
    num_seqs, num_heads, width = query.shape
    block_size = latent_cache.shape[1]
    if num_seqs == 0:
        return []
    block_n, warps = mla_decode_tiles(latent_dim, target)
    head_blocks = -(-num_heads // _BLOCK_H)
    if num_splits is None:
        bound = max_seq_len if max_seq_len is not None else block_tables.shape[1] * block_size
        num_splits = choose_num_splits(num_seqs, head_blocks, bound, target)
    parts = lse = out  # placeholders: an unsplit launch writes the output directly
    if num_splits > 1:
        parts = out.new_empty((num_seqs, num_heads, num_splits, latent_dim), dtype=torch.float32)
        lse = out.new_empty((num_seqs, num_heads, num_splits), dtype=torch.float32)
    rope_dim = width - latent_dim
    launches = [Launch(_mla_decode_kernel, (num_seqs, head_blocks, num_splits),
                       (query, latent_cache, out, parts, lse, seq_lens, block_tables, num_heads, num_splits,
                        scale * _LOG2_E, query.stride(0), query.stride(1), out.stride(0), out.stride(1),
                        latent_cache.stride(0), latent_cache.stride(1), block_tables.stride(0)),
                       {"LATENT_DIM": latent_dim, "ROPE_DIM": rope_dim, "BLOCK_SIZE": block_size,
                        "SPLIT": num_splits > 1, "BLOCK_H": _BLOCK_H, "BLOCK_N": block_n,
                        "BLOCK_L": max(16, next_power_of_2(latent_dim)), "BLOCK_R": max(16, next_power_of_2(rope_dim)),
                        "DOT_PRECISION": "ieee" if query.dtype == torch.float32 else "tf32",
                        "num_warps": warps, "num_stages": 1})]
    if num_splits > 1:
        every_row = torch.arange(num_seqs + 1, dtype=torch.int32, device=query.device)  # one token per sequence
        launches.append(Launch(_merge_splits_kernel, (num_seqs, num_heads),
                               (parts, lse, out, every_row, None, num_splits, out.stride(0), out.stride(1)),
                               {"HEAD_DIM": latent_dim, "BLOCK_SPLITS": _MAX_SPLITS,
                                "BLOCK_D": next_power_of_2(latent_dim), "HAS_SINKS": False}))
    return launches


def mla_decode_triton(
    query: torch.Tensor,  # [num_seqs, num_heads, latent_dim + rope_dim], unit stride on the last dim
    latent_cache: torch.Tensor,  # [num_blocks, block_size, 1, latent_dim + rope_dim], contiguous
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
    latent_dim: int,
    *,
    max_seq_len: int | None = None,  # bounds the split count; default: the block table's capacity
    num_splits: int | None = None,  # overrides choose_num_splits
) -> torch.Tensor:  # [num_seqs, num_heads, latent_dim]
    """Triton version of :func:`mla_decode_ref`; reads no tensor back to the host.

    Grid ``(num_seqs, ceil(num_heads / BLOCK_H), num_splits)``: a sequence, a block of its query heads,
    one slice of its keys. Memory: each cached row of a sequence is read once per head block (DeepSeek-V3's
    128 heads: 8 times), the queries once; with splits, fp32 partial outputs ``[num_seqs, num_heads,
    splits, latent_dim]`` are written and read back by the merge grid ``(num_seqs, num_heads)``.
    """
    if latent_cache.shape[2] != 1 or query.shape[-1] != latent_cache.shape[3] or not 0 < latent_dim < query.shape[-1]:
        raise ValueError(f"query {tuple(query.shape)} does not fit the latent cache {tuple(latent_cache.shape)} "
                         f"with a latent of {latent_dim}: one cached head, the latent then the rotary key")
    if query.dtype != latent_cache.dtype or not latent_cache.is_contiguous() or block_tables.stride(-1) != 1:
        raise ValueError("the query and a contiguous latent cache share a dtype; block_tables rows are unit-strided")
    query = query if query.stride(-1) == 1 else query.contiguous()
    out = query.new_empty(*query.shape[:2], latent_dim)
    run_all(mla_decode_launches(query, latent_cache, out, seq_lens, block_tables, scale, latent_dim,
                                device_target(query.device), max_seq_len, num_splits))
    return out
