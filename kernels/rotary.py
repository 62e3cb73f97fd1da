"""Rotary position embedding (GPT-NeoX layout: the head's two halves rotate together), in place.

``cos_sin_cache`` is ``[max_position, head_dim]``: the first half holds cos, the second sin, one
value per rotated pair. Plain and llama3-scaled frequencies differ only in how the cache is built
(see bulkinfer.layers.rotary); the kernel is the same.
"""

from __future__ import annotations

import torch

from ._triton import Launch, jit, next_power_of_2, tl


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


def rotary_cpu(
    positions: torch.Tensor,  # [num_tokens] int64
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    cos_sin_cache: torch.Tensor,  # [max_position, head_dim] fp32
) -> None:
    """The CPU path of :func:`rotary_ref`. fp32 runs the reference (its results unchanged). A 16-bit
    query and key rotate in their own dtype, as transformers' bf16 forward does, in six passes over half
    a head each instead of the reference's ten over whole fp32 copies; query and key heads that lie
    side by side in the fused projection, as the model lays them out, rotate as one tensor."""
    if query.dtype == torch.float32:
        return rotary_ref(positions, query, key, cos_sin_cache)
    half = query.shape[-1] // 2
    cos, sin = cos_sin_cache[positions].to(query.dtype).unsqueeze(1).split(half, dim=-1)
    for x in _side_by_side(query, key):
        x1, x2 = x.split(half, dim=-1)
        first = x1 * cos
        first.addcmul_(x2, sin, value=-1)
        second = x2 * cos
        second.addcmul_(x1, sin)
        x1.copy_(first)
        x2.copy_(second)


def _side_by_side(query: torch.Tensor, key: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(query and key as one [num_tokens, num_heads + num_kv_heads, head_dim] view)`` where key's
    heads follow query's in memory with the same strides, else ``(query, key)``."""
    heads = query.shape[1]
    follows = (query.shape[0] == key.shape[0] and query.shape[2] == key.shape[2] and query.stride() == key.stride()
               and query.untyped_storage().data_ptr() == key.untyped_storage().data_ptr()
               and key.data_ptr() == query.data_ptr() + heads * query.stride(1) * query.element_size())
    if not follows:
        return query, key
    return (query.as_strided((query.shape[0], heads + key.shape[1], query.shape[2]), query.stride()),)


@jit
def _rotate_heads(x_ptr, stride_h, cos, sin, NUM_HEADS: tl.constexpr, HALF: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    # x_ptr points at one token's [heads, head_dim] rows; both halves are read before either is written.
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < NUM_HEADS) & (dims < HALF)
    first = x_ptr + heads * stride_h + dims
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(first, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(first + HALF, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)


@jit
def _rotary_kernel(
    positions_ptr, q_ptr, k_ptr, cache_ptr,
    q_stride_t, q_stride_h, k_stride_t, k_stride_h, cache_stride,
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HALF: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_KV_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    position = tl.load(positions_ptr + token).to(tl.int64)
    dims = tl.arange(0, BLOCK_HALF)[None, :]
    row = cache_ptr + position * cache_stride + dims
    cos = tl.load(row, mask=dims < HALF, other=0.0).to(tl.float32)
    sin = tl.load(row + HALF, mask=dims < HALF, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr + token * q_stride_t, q_stride_h, cos, sin, NUM_HEADS, HALF, BLOCK_H, BLOCK_HALF)
    _rotate_heads(k_ptr + token * k_stride_t, k_stride_h, cos, sin, NUM_KV_HEADS, HALF, BLOCK_KV_H, BLOCK_HALF)


def rotary_triton(
    positions: torch.Tensor,  # [num_tokens] int32 or int64
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], rotated in place, unit stride on head_dim
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], rotated in place
    cos_sin_cache: torch.Tensor,  # [max_position, head_dim]
) -> None:
    """Triton version of :func:`rotary_ref`: query and key of a token in one program.

    Grid: ``(num_tokens,)``; axis 0 is the token, whose program reads its cos/sin row once and
    rotates all its query and key heads. Memory: reads and writes q and k once each (in place),
    reads one ``head_dim`` row of the table per token.
    """
    num_tokens, _, head_dim = query.shape
    if key.shape[0] != num_tokens or key.shape[2] != head_dim or cos_sin_cache.shape[-1] != head_dim:
        raise ValueError(f"rotary shapes do not agree: query {tuple(query.shape)}, key {tuple(key.shape)}, "
                         f"cos_sin_cache {tuple(cos_sin_cache.shape)}")
    if query.stride(-1) != 1 or key.stride(-1) != 1 or cos_sin_cache.stride(-1) != 1:
        raise ValueError("rotary works in place, so query, key and cos_sin_cache need unit stride on head_dim")
    if num_tokens == 0:
        return
    rotary_launch(positions, query, key, cos_sin_cache)()


def rotary_launch(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                  cos_sin_cache: torch.Tensor) -> Launch:
    """The launch that rotates ``query`` and ``key``, decided without a device."""
    num_tokens, num_heads, head_dim = query.shape
    half = head_dim // 2
    return Launch(_rotary_kernel, (num_tokens,),
                  (positions, query, key, cos_sin_cache, query.stride(0), query.stride(1), key.stride(0),
                   key.stride(1), cos_sin_cache.stride(0)),
                  {"NUM_HEADS": num_heads, "NUM_KV_HEADS": key.shape[1], "HALF": half,
                   "BLOCK_H": next_power_of_2(num_heads), "BLOCK_KV_H": next_power_of_2(key.shape[1]),
                   "BLOCK_HALF": next_power_of_2(half)})
