"""bulkinfer's paged attention, registered as an attention implementation of transformers.

A step's batch reaches the model as one row of every sequence's new tokens, ``[1, T]``, with each
token's position and no attention mask: which keys a token sees is the paged cache's business, read
from the step's metadata. That metadata travels in a context variable rather than as a keyword
argument, because not every model passes its keyword arguments down to attention.

Keys and values may differ in head size (multi-head latent attention: DeepSeek's 192-wide keys, 128-wide
values). The kernels take one head size, so both are zero-padded to the larger and the pad is dropped from
the output: a zero column adds nothing to a score or to an output column, so the result is exact, and the
cost is the pad's cache bytes (a fifth more than the two widths need, at DeepSeek's sizes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.ops import KernelOps

ATTENTION_NAME = "bulkinfer_paged"


class UnsupportedAttentionError(ValueError):
    """A model's attention needs something the paged kernels do not do."""


@dataclass
class LayerCache:
    """One attention layer's KV blocks, bound by the model runner once the pool exists."""

    kv_heads: int
    head_dim: int
    k_cache: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    v_cache: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    k_scale: float = 1.0  # an FP8 cache's scales (this path reads none from the checkpoint)
    v_scale: float = 1.0


@dataclass
class Step:
    attn: AttentionMetadata
    ops: KernelOps
    caches: dict[int, LayerCache]  # by the attention module's layer_idx
    probing: bool = False  # a first step on the loaded model: caches made on demand, layers checked
    layers_seen: list[int] = field(default_factory=list)


_STEP: ContextVar[Step | None] = ContextVar("bulkinfer_attention_step", default=None)


@contextlib.contextmanager
def running(step: Step) -> Iterator[Step]:
    token = _STEP.set(step)
    try:
        yield step
    finally:
        _STEP.reset(token)


def paged_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None,
                            sliding_window: int | None = None, softcap: float | None = None,
                            s_aux: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention contract: query [1, heads, T, dim], key/value [1, kv_heads, T, dim] of
    the new tokens, positions applied; returns [1, T, heads, dim]. ``s_aux``: gpt-oss's attention
    sinks, a logit per query head, passed to the kernels as ``sinks``."""
    step = _STEP.get()
    if step is None:
        raise RuntimeError("bulkinfer's paged attention runs inside a bulkinfer engine step only")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, heads, dim], views
    value_dim, scaling = v.shape[-1], scaling if scaling is not None else q.shape[-1] ** -0.5
    q, k, v = one_head_size(q, k, v)
    if step.probing:
        check_supported(module, kwargs)
        step.layers_seen.append(module.layer_idx)
        step.caches.setdefault(module.layer_idx, probe_cache(k))
    cache = step.caches[module.layer_idx]
    attn = step.attn
    scales = {"k_scale": cache.k_scale, "v_scale": cache.v_scale}
    step.ops.store_kv(k, v, cache.k_cache, cache.v_cache, attn.slot_mapping, **scales)
    out = step.ops.paged_attention(
        q, cache.k_cache, cache.v_cache, attn.query_start_loc, attn.seq_lens, attn.block_tables,
        scaling, max_query_len=attn.max_query_len,
        max_seq_len=attn.max_seq_len, min_query_len=attn.min_query_len, sliding_window=sliding_window or 0,
        softcap=softcap or 0.0, sinks=None if s_aux is None else s_aux.float(), key=k, value=v, **scales)
    return out[None, ..., :value_dim], None


def one_head_size(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k and v ([T, heads, dim]) zero-padded to the larger of the key and value head sizes."""
    size = max(k.shape[-1], v.shape[-1])
    return tuple(t if t.shape[-1] == size else F.pad(t, (0, size - t.shape[-1])) for t in (q, k, v))


def check_supported(module: nn.Module, kwargs: dict) -> None:
    if getattr(module, "layer_idx", None) is None:
        raise UnsupportedAttentionError(f"its attention module {type(module).__name__} has no layer_idx")
    if not getattr(module, "is_causal", True):
        raise UnsupportedAttentionError("its attention is bidirectional, not causal")


def probe_cache(key: torch.Tensor) -> LayerCache:
    """A one-block cache for a probe step's tokens, shaped like the layer's keys."""
    tokens, kv_heads, head_dim = key.shape
    cache = LayerCache(kv_heads, head_dim, key.new_zeros(1, tokens, kv_heads, head_dim))
    cache.v_cache = torch.zeros_like(cache.k_cache)
    return cache


def register() -> None:
    """Make ``attn_implementation="bulkinfer_paged"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention_forward)
