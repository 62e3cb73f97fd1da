"""Attention of a variable-length batch of new tokens over the paged KV cache.

Every sequence in a step brings ``q_len`` new tokens (1 for a decode step, a chunk for prefill) and
has ``seq_len`` tokens in the cache once they are stored (its cached prefix plus the new ones).
New token ``j`` sits at position ``seq_len - q_len + j`` and attends causally to cache positions
``0 .. seq_len - q_len + j``. Decode and chunked prefill over a cached prefix are the same rule.

The reference below is also the CPU execution path: it gathers each sequence's blocks and calls
PyTorch's scaled_dot_product_attention, batching all decode rows into one call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def paged_attention_ref(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    q_lens = [end - start for start, end in zip(starts, starts[1:])]
    out = torch.empty_like(query)
    decode_rows = [i for i, n in enumerate(q_lens) if n == 1]
    if decode_rows:
        rows = torch.tensor([starts[i] for i in decode_rows], device=query.device)
        out[rows] = _decode(query[rows], k_cache, v_cache, block_tables[decode_rows],
                            seq_lens[decode_rows], max(lens[i] for i in decode_rows), scale)
    for i, q_len in enumerate(q_lens):
        if q_len > 1:
            q = query[starts[i]:starts[i + 1]]
            out[starts[i]:starts[i + 1]] = _extend(q, k_cache, v_cache, block_tables[i], lens[i], scale)
    return out


def _gather(cache: torch.Tensor, block_table: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """[..., max_blocks] block ids -> [..., num_tokens, num_kv_heads, head_dim] cache rows."""
    block_size = cache.shape[1]
    num_blocks = -(-num_tokens // block_size)
    blocks = cache[block_table[..., :num_blocks].long()]  # [..., num_blocks, block_size, kvh, d]
    return blocks.flatten(-4, -3)[..., :num_tokens, :, :]


def _decode(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale):
    # q: [batch, heads, dim]; keys padded to max_len and masked past each sequence's length.
    k = _gather(k_cache, block_tables, max_len).transpose(1, 2)  # [batch, kvh, max_len, dim]
    v = _gather(v_cache, block_tables, max_len).transpose(1, 2)
    mask = torch.arange(max_len, device=q.device)[None, :] < seq_lens[:, None].to(q.device)
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2).to(k.dtype), k, v, attn_mask=mask[:, None, None, :], scale=scale,
        enable_gqa=q.shape[1] != k.shape[1])
    return out.squeeze(2).to(q.dtype)


def _extend(q, k_cache, v_cache, block_table, seq_len, scale):
    # q: [q_len, heads, dim], the last q_len positions of a sequence of seq_len cached tokens.
    q_len = q.shape[0]
    k = _gather(k_cache, block_table, seq_len).transpose(0, 1)  # [kvh, seq_len, dim]
    v = _gather(v_cache, block_table, seq_len).transpose(0, 1)
    if q_len == seq_len:
        mask, causal = None, True
    else:
        key_pos = torch.arange(seq_len, device=q.device)
        query_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        mask, causal = key_pos[None, :] <= query_pos[:, None], False
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).to(k.dtype), k, v, attn_mask=mask, is_causal=causal, scale=scale,
        enable_gqa=q.shape[1] != k.shape[0])
    return out.transpose(0, 1).to(q.dtype)
