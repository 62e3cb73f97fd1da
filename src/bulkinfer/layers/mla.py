"""Multi-head latent attention (DeepSeek-V2, V3, R1, Kimi K2) over a paged cache of latent rows.

Each token caches one row shared by every head: its compressed latent (``kv_lora_rank`` values, normed)
followed by its rotary key (``qk_rope_head_dim`` values, rotated): 576 values for DeepSeek-V3, where
multi-head attention at that width would cache 2 x 128 heads x 128. The cache is the paged layout with one
KV head and one plane (store_kv writes the row as both "key" and "value" into the same tensor).

Two forms of the same attention, each where it is cheaper:

- prefill and extend rows expand their sequence's rows through ``kv_b_proj`` into per-head keys
  ([no-rotary | rotary], the rotary part shared by all heads) and values, and run ordinary causal attention;
- decode rows run the absorbed form (kernels/mla_decode.py): the no-rotary query is carried into the latent
  space through kv_b's key block, attention reads the cached rows as they are, and its latent output comes back
  through kv_b's value block. A decode token then reads 576 values per cached token, not 128 x 320.

DeepSeek's checkpoints lay each rotary pair side by side (x0, x1), (x2, x3), ...; the rotary kernel turns the
two halves of a head together, so the rotary parts are reordered (evens, then odds) before they are turned.
Queries and keys are reordered alike, so their dot products, and so the model, are unchanged.

Under tensor parallelism each rank holds 1/K of the heads (q, kv_b and o split by heads); the latent
projection and the cache's rows are the same on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bulkinfer.kernels.paged_attention import extend_attention, gather_rows
from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.layers.linear import ColumnParallelLinear, Linear, RowParallelLinear
from bulkinfer.layers.norm import RMSNorm
from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import TensorParallel

_HEADS = "attention heads"
_LORA_NORM_EPS = 1e-6  # DeepSeek's q_a and kv_a norms keep RMSNorm's default, whatever rms_norm_eps says


@dataclass(frozen=True)
class MLAShape:
    hidden_size: int
    num_heads: int
    q_lora_rank: int  # 0: queries straight from q_proj (DeepSeek-V2-Lite); else through q_a, its norm, q_b
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    softmax_scale: float  # qk_head_dim ** -0.5, times YaRN's softmax mscale
    interleaved_rope: bool  # rotary pairs side by side in the checkpoint (DeepSeek's layout)
    bias: bool = False  # attention_bias: q_a, kv_a and o projections

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def projection_weights(self) -> int:
        """A layer's matmul weights over all heads: queries, the latent, its expansion, the output."""
        heads, hidden = self.num_heads, self.hidden_size
        q = hidden * heads * self.qk_head_dim
        if self.q_lora_rank:  # down to the rank, then up to the heads
            q = (hidden + heads * self.qk_head_dim) * self.q_lora_rank
        expand = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + hidden * self.row_width + expand + heads * self.v_head_dim * hidden

    @property
    def row_width(self) -> int:
        """Values a token caches per layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class MLAttention(nn.Module):
    def __init__(self, shape: MLAShape, ops: KernelOps, tp: TensorParallel):
        super().__init__()
        self.shape = shape
        self.num_heads = tp.split(shape.num_heads, _HEADS)
        hidden, heads = shape.hidden_size, shape.num_heads
        if shape.q_lora_rank:
            self.q_a_proj = Linear(hidden, shape.q_lora_rank, bias=shape.bias)
            self.q_a_layernorm = RMSNorm(shape.q_lora_rank, _LORA_NORM_EPS, ops)
            self.q_b_proj = ColumnParallelLinear(shape.q_lora_rank, heads * shape.qk_head_dim, tp, _HEADS)
        else:
            self.q_proj = ColumnParallelLinear(hidden, heads * shape.qk_head_dim, tp, _HEADS)
        self.kv_a_proj_with_mqa = Linear(hidden, shape.row_width, bias=shape.bias)
        self.kv_a_layernorm = RMSNorm(shape.kv_lora_rank, _LORA_NORM_EPS, ops)
        self.kv_b_proj = ColumnParallelLinear(shape.kv_lora_rank, heads * (shape.qk_nope_head_dim + shape.v_head_dim),
                                              tp, _HEADS)
        self.kv_b_proj.plain_weight = True  # the absorbed decode reads views of it, so it is never packed
        self.o_proj = RowParallelLinear(heads * shape.v_head_dim, hidden, tp, _HEADS, bias=shape.bias)
        self.ops = ops
        # Bound by the model runner once the KV pool exists: both name the one [num_blocks, block_size, 1, row]
        # tensor of latent rows.
        self.k_cache = self.v_cache = torch.empty(0)

    @property
    def kv_shape(self) -> KVShape:
        return KVShape(1, self.shape.row_width, planes=1)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, attn: AttentionMetadata,
                rope_cache: torch.Tensor) -> torch.Tensor:  # x: [T, hidden] -> [T, hidden]
        shape = self.shape
        q = self._queries(x).view(-1, self.num_heads, shape.qk_head_dim)
        q_nope, q_rope = q.split([shape.qk_nope_head_dim, shape.qk_rope_head_dim], dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([shape.kv_lora_rank, shape.qk_rope_head_dim], dim=-1)
        q_rope, k_rope = self._rotary_layout(q_rope), self._rotary_layout(k_rope[:, None])
        self.ops.rotary(positions, q_rope, k_rope, rope_cache)
        rows = torch.cat([self.kv_a_layernorm(latent), k_rope[:, 0]], dim=-1)[:, None]  # [T, 1, row]
        self.ops.store_kv(rows, rows, self.k_cache, self.v_cache, attn.slot_mapping)
        out = self._attend(q_nope, q_rope, rows, attn)  # [T, heads, v_head_dim]
        return self.o_proj(out.reshape(-1, self.num_heads * shape.v_head_dim))

    def _queries(self, x: torch.Tensor) -> torch.Tensor:
        if self.shape.q_lora_rank:
            return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return self.q_proj(x)

    def _rotary_layout(self, x: torch.Tensor) -> torch.Tensor:
        """[..., rope] -> a contiguous copy whose halves are the rotary pairs' first and second values."""
        if self.shape.interleaved_rope:
            return x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)
        return x.contiguous()

    def _attend(self, q_nope: torch.Tensor, q_rope: torch.Tensor, rows: torch.Tensor,
                attn: AttentionMetadata) -> torch.Tensor:
        """Decode rows in the absorbed form, the other rows expanded. A decode-only step reads no length back
        to the host (so it can be captured in a CUDA graph)."""
        if attn.max_query_len == 1:
            return self._decode(q_nope, q_rope, attn.seq_lens, attn.block_tables, attn.max_seq_len)
        starts, lens = attn.query_start_loc.tolist(), attn.seq_lens.tolist()
        out = q_nope.new_empty(*q_nope.shape[:2], self.shape.v_head_dim)
        decoding = [i for i, (start, end) in enumerate(zip(starts, starts[1:])) if end - start == 1]
        if decoding:
            at = torch.tensor([starts[i] for i in decoding], device=q_nope.device)
            out[at] = self._decode(q_nope[at], q_rope[at], attn.seq_lens[decoding], attn.block_tables[decoding],
                                   max(lens[i] for i in decoding))
        for i, (start, end) in enumerate(zip(starts, starts[1:])):
            if end - start > 1:
                context = rows[start:end] if end - start == lens[i] else gather_rows(
                    self.k_cache, attn.block_tables[i], lens[i], 1.0, rows.dtype)
                out[start:end] = self._extend(q_nope[start:end], q_rope[start:end], context)
        return out

    def _extend(self, q_nope: torch.Tensor, q_rope: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """One sequence's new tokens [q_len, heads, ...] over its whole context of cached rows [seq_len, 1, row]:
        keys and values expanded from the latent."""
        shape = self.shape
        latent, k_rope = context[:, 0].split([shape.kv_lora_rank, shape.qk_rope_head_dim], dim=-1)
        kv = self.kv_b_proj(latent).view(-1, self.num_heads, shape.qk_nope_head_dim + shape.v_head_dim)
        k_nope, value = kv.split([shape.qk_nope_head_dim, shape.v_head_dim], dim=-1)
        key = torch.cat([k_nope, k_rope[:, None].expand(-1, self.num_heads, -1)], dim=-1)
        return extend_attention(torch.cat([q_nope, q_rope], dim=-1), key, value, shape.softmax_scale)

    def _decode(self, q_nope: torch.Tensor, q_rope: torch.Tensor, seq_lens: torch.Tensor,
                block_tables: torch.Tensor, max_seq_len: int) -> torch.Tensor:
        """One new token per sequence [seqs, heads, ...], absorbed: attention in the latent space."""
        shape = self.shape
        w_uk, w_uv = self._absorbed_weights()
        q_latent = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [seqs, heads, kv_lora_rank]
        query = torch.cat([q_latent, q_rope], dim=-1)
        out = self.ops.mla_decode(query, self.k_cache, seq_lens, block_tables, shape.softmax_scale,
                                  shape.kv_lora_rank, max_seq_len=max_seq_len)
        return torch.bmm(out.transpose(0, 1), w_uv).transpose(0, 1)  # [seqs, heads, v_head_dim]

    def _absorbed_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """kv_b's key block per head [heads, nope, kv_lora_rank] and value block [heads, kv_lora_rank, v]:
        views of its weight, so they follow whatever the loader wrote into it."""
        shape = self.shape
        weight = self.kv_b_proj.weight.view(self.num_heads, shape.qk_nope_head_dim + shape.v_head_dim, -1)
        return weight[:, :shape.qk_nope_head_dim], weight[:, shape.qk_nope_head_dim:].transpose(1, 2)
