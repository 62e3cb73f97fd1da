"""Write the new tokens' keys and values into the paged KV cache.

Cache layout (all kernels share it): ``[num_blocks, block_size, num_kv_heads, head_dim]`` for keys
and for values. A token's slot is ``block_id * block_size + offset``; slot -1 marks a padding token
that must not be written.

An FP8 cache (see fp8.py) stores ``clamp(x / scale, -448, 448)`` as e4m3, with the layer's key and
value scales; a cache of the compute dtype ignores them.
"""

from __future__ import annotations

import torch

from . import fp8
from ._triton import Launch, jit, next_power_of_2, tl
from .fp8 import e4m3_bits


def store_kv_ref(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [num_tokens] int64
    *,
    k_scale: float = 1.0,  # the layer's FP8 scales; unused by a cache of the compute dtype
    v_scale: float = 1.0,
) -> None:
    if bool((slot_mapping < 0).any()):  # padding is rare; masking costs a copy of every row
        keep = slot_mapping >= 0
        key, value, slot_mapping = key[keep], value[keep], slot_mapping[keep]
    _write_rows(k_cache, slot_mapping, key, k_scale)
    _write_rows(v_cache, slot_mapping, value, v_scale)


def _write_rows(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor, scale: float) -> None:
    if fp8.is_fp8(cache):  # PyTorch has no index_copy_ for float8 on the CPU: its bytes are copied
        cache, rows = cache.view(torch.uint8), fp8.quantize(rows, scale).view(torch.uint8)
    cache.view(-1, *cache.shape[2:]).index_copy_(0, slots, rows.to(cache.dtype))


@jit
def _store_kv_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    key_stride_t, key_stride_h, value_stride_t, value_stride_h, k_scale, v_scale,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, FP8: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:
        return  # a padding token: it costs one index read
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_D)[None, :]
    mask = (heads < NUM_KV_HEADS) & (dims < HEAD_DIM)
    key = tl.load(key_ptr + token * key_stride_t + heads * key_stride_h + dims, mask=mask)
    value = tl.load(value_ptr + token * value_stride_t + heads * value_stride_h + dims, mask=mask)
    dst = slot * (NUM_KV_HEADS * HEAD_DIM) + heads * HEAD_DIM + dims
    if FP8:  # the cache's bytes: e4m3 of the scaled-down values
        tl.store(k_cache_ptr + dst, e4m3_bits(key.to(tl.float32) / k_scale), mask=mask)
        tl.store(v_cache_ptr + dst, e4m3_bits(value.to(tl.float32) / v_scale), mask=mask)
    else:
        tl.store(k_cache_ptr + dst, key.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + dst, value.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv_triton(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim], any row/head strides
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim], contiguous
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [num_tokens] int32 or int64
    *,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Triton version of :func:`store_kv_ref`.

    Grid: ``(num_tokens,)``; axis 0 is the new token, whose program copies all its KV heads.
    Memory: reads ``num_tokens * (2 * num_kv_heads * head_dim)`` elements and one slot id per
    token, writes the same elements into the cache; padding tokens read only their slot id.
    """
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    _check_cache(k_cache, v_cache, num_kv_heads, head_dim)
    key, value = _unit_stride(key), _unit_stride(value)
    store_kv_launch(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)()


def store_kv_launch(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slot_mapping: torch.Tensor, k_scale: float = 1.0, v_scale: float = 1.0) -> Launch:
    """The launch that stores ``key`` and ``value`` (unit stride on head_dim), decided without a device."""
    num_tokens, num_kv_heads, head_dim = key.shape
    return Launch(_store_kv_kernel, (num_tokens,),
                  (key, value, fp8.kernel_view(k_cache), fp8.kernel_view(v_cache), slot_mapping, key.stride(0),
                   key.stride(1), value.stride(0), value.stride(1), float(k_scale), float(v_scale)),
                  {"NUM_KV_HEADS": num_kv_heads, "HEAD_DIM": head_dim, "BLOCK_H": next_power_of_2(num_kv_heads),
                   "BLOCK_D": next_power_of_2(head_dim), "FP8": fp8.is_fp8(k_cache)})


def _check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, num_kv_heads: int, head_dim: int) -> None:
    if k_cache.shape != v_cache.shape or tuple(k_cache.shape[2:]) != (num_kv_heads, head_dim):
        raise ValueError(f"KV cache shapes {tuple(k_cache.shape)} / {tuple(v_cache.shape)} do not fit "
                         f"{num_kv_heads} KV heads of size {head_dim}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("the KV cache must be contiguous: slots are addressed as flat rows")


def _unit_stride(x: torch.Tensor) -> torch.Tensor:
    # The kernel walks head_dim with unit stride; other strides are passed through.
    return x if x.stride(-1) == 1 else x.contiguous()
