"""Write the new tokens' keys and values into the paged KV cache.

Cache layout (all kernels share it): ``[num_blocks, block_size, num_kv_heads, head_dim]`` for keys
and for values. A token's slot is ``block_id * block_size + offset``; slot -1 marks a padding token
that must not be written.
"""

from __future__ import annotations

import torch


def store_kv_ref(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [num_tokens] int64
) -> None:
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    k_cache.view(-1, *k_cache.shape[2:])[slots] = key[keep].to(k_cache.dtype)
    v_cache.view(-1, *v_cache.shape[2:])[slots] = value[keep].to(v_cache.dtype)
