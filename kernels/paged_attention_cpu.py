"""Decode attention on the CPU that reads the paged cache in place, compiled by TorchInductor.

The reference's decode (``decode_ref``) gathers a group's keys and values into padded tensors and
hands them to scaled_dot_product_attention: every cached byte a step attends to is copied once and
read twice, and on a CPU that memory traffic, not arithmetic, is what decode attention costs.
``_attend`` states the same computation with the gather inline; TorchInductor fuses it into C++
loops that load each key and value through the block table once, never materializing them.
For 128 sequences of up to 400 tokens (4 KV heads of 64) that is 7x faster than the reference.

The reference's length groups stay (padding costs arithmetic here, if no longer copies). A compile
costs about 20 s the first time on a machine (then Inductor loads it from its disk cache, see
engine/compile_cache.py and inductor_isa.py), so groups too small for the copy to matter keep the
reference; and a machine where Inductor cannot compile (no C++ compiler) keeps it too, after one warning.

A sliding window, a soft-cap and sinks (see paged_attention.py) are part of the compiled kernel, one
compile per distinct combination; keys before a window are masked rather than skipped (they cost reads).

An FP8 cache is read by the same compiled loops, each key and value converted as it is loaded; the
layer's scales are applied outside them (the key scale to the queries, the value scale to the
output), so layers with different scales share one compile.
"""

from __future__ import annotations

import functools
import logging

import torch

from .fp8 import is_fp8
from .inductor_isa import skip_repeated_isa_probe
from .paged_attention import decode_ref, paged_attention_ref

logger = logging.getLogger(__name__)

MIN_KEYS = 4096  # sequences x padded length below which the reference's copy is cheap enough


def _attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
            seq_lens: torch.Tensor, scale: float, sliding_window: int = 0, softcap: float = 0.0,
            sinks: torch.Tensor | None = None) -> torch.Tensor:
    # q: [batch, heads, dim]; caches: [num_blocks, block_size, kv_heads, dim]; block_tables: [batch, blocks].
    # Keys keep their (block, slot) coordinates and only the batch and block counts are symbolic: a
    # flat position over symbolic sizes cost the compiled loops integer divisions per key (1.9x slower).
    batch, heads, dim = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    blocks = block_tables.long()
    q = q.float().view(batch, 1, 1, kv_heads, heads // kv_heads, dim)  # a query group per KV head
    k = k_cache[blocks].float()[..., None, :]  # [batch, blocks, block_size, kv_heads, 1, dim]: fused, not copied
    scores = (q * k).sum(-1) * scale  # [batch, blocks, block_size, kv_heads, group]
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    slots = torch.arange(block_size, device=q.device)
    pos = torch.arange(blocks.shape[1], device=q.device)[:, None] * block_size + slots  # [blocks, block_size]
    hidden = pos >= seq_lens[:, None, None]  # [batch, blocks, block_size]
    if sliding_window:  # masked, not skipped: the window's keys are a suffix of every row's blocks
        hidden |= pos < seq_lens[:, None, None] - sliding_window
    scores = scores.masked_fill(hidden[..., None, None], float("-inf"))
    top = scores.amax((1, 2), keepdim=True)  # [batch, 1, 1, kv_heads, group]
    if sinks is not None:
        sinks = sinks.float().view(1, 1, 1, kv_heads, -1)
        top = torch.maximum(top, sinks)
    weights = (scores - top).exp()
    total = weights.sum((1, 2))
    if sinks is not None:  # the sink's weight joins the denominator only
        total = total + (sinks - top).exp()[:, 0, 0]
    v = v_cache[blocks].float()[..., None, :]
    out = (weights[..., None] * v).sum((1, 2)) / total[..., None]
    return out.reshape(batch, heads, dim)


@functools.cache
def _compiled():
    # Shapes are static but for the batch, the blocks read and the pool's size, so the head count,
    # head size and block size are constants in the generated loops.
    skip_repeated_isa_probe()
    return torch.compile(_attend)


def attend_compiled(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale, sliding_window=0, softcap=0.0,
                    k_scale=1.0, v_scale=1.0, sinks=None):
    """``decode_ref``'s contract, always through the compiled kernel (one compile per window and cap)."""
    tables = block_tables[:, :-(-max_len // k_cache.shape[1])].contiguous()
    kv_fp8 = is_fp8(k_cache)
    queries = q.float() * k_scale if kv_fp8 else q
    for tensor in (queries, tables, seq_lens, k_cache, v_cache):
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
    torch._dynamo.maybe_mark_dynamic(tables, 1)
    out = _compiled()(queries, k_cache, v_cache, tables, seq_lens, scale, sliding_window, softcap, sinks)
    return (out * v_scale if kv_fp8 else out).to(q.dtype)


_broken = False  # set when Inductor cannot compile here


def decode_compiled(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale, **variant):
    """``decode_ref``'s contract: [batch, heads, dim] attention of one query per sequence."""
    global _broken
    if _broken or q.shape[0] * max_len < MIN_KEYS:
        return decode_ref(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale, **variant)
    try:
        return attend_compiled(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale, **variant)
    except Exception as exc:  # Inductor raises many kinds; the reference computes the same thing
        _broken = True
        logger.warning("compiled CPU decode attention is unavailable, using the reference: %s",
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return decode_ref(q, k_cache, v_cache, block_tables, seq_lens, max_len, scale, **variant)


paged_attention_cpu = functools.partial(paged_attention_ref, decode=decode_compiled)
