"""Batch-invariant attention on the CPU: each new token's result depends on its own sequence alone.

The reference and the CPU path give a token bits that depend on its company: decode rows are
padded to their group's longest sequence, a prefill chunk's scores go through matmuls whose
blocking follows the chunk's length, and softmax sums run over rows of varying width. Here every
new token folds its sequence's cache in KV blocks from block 0, one block at a time, with an online
softmax (as the Triton extend kernel does on a GPU): the same additions in the same order for a
given token, whether it is prefilled alone, in a chunk, in a mixed batch or after a preemption.
Blocks past a token's position are fully masked and add exact zeros.
"""

from __future__ import annotations

import torch


def paged_attention_invariant(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    scale: float,
    **hints,  # the launch hints of paged_attention_ref; nothing here depends on them
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    num_tokens, num_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if num_tokens == 0:
        return torch.empty_like(query)
    q_lens = query_start_loc[1:] - query_start_loc[:-1]
    seq_of = torch.repeat_interleave(torch.arange(q_lens.shape[0], device=query.device), q_lens.long())
    first = query_start_loc[:-1].long()[seq_of]
    # A token's position: its sequence's cached prefix plus its place among the new tokens.
    positions = (seq_lens.long() - q_lens.long())[seq_of] + torch.arange(num_tokens, device=query.device) - first
    tables = block_tables.long()[seq_of]  # [num_tokens, max_blocks]
    q = query.float().view(num_tokens, 1, num_kv_heads, num_heads // num_kv_heads, head_dim)
    m = torch.full((num_tokens, num_kv_heads, num_heads // num_kv_heads), float("-inf"), device=query.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(num_tokens, num_kv_heads, num_heads // num_kv_heads, head_dim, device=query.device)
    slots = torch.arange(block_size, device=query.device)
    for block in range(-(-int(seq_lens.max()) // block_size)):
        k = k_cache[tables[:, block]].float()[:, :, :, None, :]  # [tokens, block_size, kv_heads, 1, dim]
        scores = (q * k).sum(-1) * scale  # [tokens, block_size, kv_heads, group]
        hidden = block * block_size + slots[None, :] > positions[:, None]
        scores = scores.masked_fill(hidden[:, :, None, None], float("-inf"))
        m_new = torch.maximum(m, scores.amax(1))
        p = (scores - m_new[:, None]).exp()
        alpha = (m - m_new).exp()
        v = v_cache[tables[:, block]].float()[:, :, :, None, :]
        l = l * alpha + p.sum(1)
        acc = acc * alpha[..., None] + (p[..., None] * v).sum(1)
        m = m_new
    return (acc / l[..., None]).view(num_tokens, num_heads, head_dim).to(query.dtype)
