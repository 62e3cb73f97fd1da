"""Rotary position embedding (GPT-NeoX layout: the head's two halves rotate together), in place.

``cos_sin_cache`` is ``[max_position, head_dim]``: the first half holds cos, the second sin, one
value per rotated pair. Plain and llama3-scaled frequencies differ only in how the cache is built
(see bulkinfer.layers.rotary); the kernel is the same.
"""

from __future__ import annotations

import torch


def rotary_ref(
    positions: torch.Tensor,  # [num_tokens] int64
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    cos_sin_cache: torch.Tensor,  # [max_position, head_dim] fp32
) -> None:
    cos, sin = cos_sin_cache[positions].unsqueeze(1).chunk(2, dim=-1)
    for x in (query, key):
        x1, x2 = x.float().chunk(2, dim=-1)
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        x.copy_(rotated.to(x.dtype))
