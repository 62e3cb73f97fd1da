"""The Llama-family decoder: Llama (incl. llama3 rope), Mistral, Qwen2 (qkv bias), Qwen3 (q/k norm), and
their mixture-of-experts kin Mixtral, Qwen2-MoE and Qwen3-MoE (a sparse MLP in some or all layers),
gpt-oss (sliding and full layers with attention sinks, biased projections, YaRN, biased clamped-SwiGLU experts),
DeepSeek-V2/V3 (multi-head latent attention over a cache of latent rows, layers/mla.py), the hybrids Qwen3-Next
and Qwen3.5 (gated delta-net layers beside gated attention, layers/gated_delta_net.py),
and Granite 4.0-H (Mamba2 layers beside attention without rotary, layers/mamba2.py; experts beside an ungated shared
MLP; Granite's multipliers on the embeddings, the residual branches, the softmax and the logits), and LFM2 (short
convolutions beside attention, layers/short_conv.py; its names translated by models/lfm2.py).

Projections are fused (q/k/v into one matrix, gate/up into one) so each layer makes two big
matmuls where Hugging Face's code makes five; the loader stacks the checkpoint's tensors.
Model code sees a flat batch of tokens: ``forward(input_ids [T], positions [T], attn)``.
Under tensor parallelism each rank builds the same modules with 1/K of the heads and MLP columns.
"""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.gated_delta_net import GatedDeltaNet, GatedDeltaNetShape
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.layers.linear import ColumnParallelLinear, RowParallelLinear
from bulkinfer.layers.mamba2 import Mamba2Mixer, Mamba2Shape
from bulkinfer.layers.mla import MLAttention
from bulkinfer.layers.mlp import MLP
from bulkinfer.layers.moe import EXPERT_COLUMNS, SHARED_COLUMNS, SparseMoeBlock
from bulkinfer.layers.norm import RMSNorm
from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import SINGLE, TensorParallel
from bulkinfer.layers.rotary import cos_sin_cache
from bulkinfer.layers.short_conv import ShortConv, ShortConvShape
from bulkinfer.layers.vocab_parallel import ParallelLMHead, VocabParallelEmbedding
from bulkinfer.models.config import ModelConfig

# What tensor parallelism splits, as its error messages name them.
HEADS, KV_HEADS, MLP_COLUMNS = "attention heads", "key/value heads", "MLP columns (intermediate_size)"


def check_splits(config: ModelConfig, tp: TensorParallel) -> None:
    """Fail before anything is built if the model does not split evenly over tp.size ranks."""
    splits = [(config.num_heads, HEADS), (config.num_kv_heads, KV_HEADS), (config.intermediate_size, MLP_COLUMNS)]
    if config.moe is not None:
        splits += [(config.moe.intermediate_size, EXPERT_COLUMNS),
                   (config.moe.shared_intermediate_size, SHARED_COLUMNS)]
    for total, what in splits:
        tp.split(total, what)
    if config.hybrid is not None and tp.size > 1:
        raise ValueError("hybrid models (recurrent layers) run on one device: set tensor_parallel_size to 1")


class OffsetRMSNorm(RMSNorm):
    """Qwen3-Next's and Qwen3.5's RMSNorm: the checkpoint stores weight - 1, so it scales by 1 + weight."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        out, new_residual = self.ops.rms_norm(x, self.weight + 1, self.eps, residual)
        return out if residual is None else (out, new_residual)


def make_norm(config: ModelConfig, size: int, ops: KernelOps) -> RMSNorm:
    return (OffsetRMSNorm if config.qwen_hybrid else RMSNorm)(size, config.rms_norm_eps, ops)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, ops: KernelOps, tp: TensorParallel):
        super().__init__()
        self.head_dim = config.head_dim
        self.num_heads = tp.split(config.num_heads, HEADS)
        self.num_kv_heads = tp.split(config.num_kv_heads, KV_HEADS)
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = config.attention_multiplier or self.head_dim ** -0.5
        # Qwen's hybrids gate attention's output: each query head's projection is followed by its gate's.
        self.output_gate = config.qwen_hybrid
        self.q_width = (2 if self.output_gate else 1) * self.q_size
        # This rank's q rows, then its k rows, then its v rows (the loader lays them out so).
        self.qkv_proj = ColumnParallelLinear(config.hidden_size, (config.num_heads * self.q_width // self.q_size
                                                                  + 2 * config.num_kv_heads) * self.head_dim,
                                             tp, HEADS, bias=config.qkv_bias)
        self.o_proj = RowParallelLinear(config.num_heads * self.head_dim, config.hidden_size, tp, HEADS,
                                        bias=config.o_bias)
        self.sliding_window = config.window(layer)
        self.sinks = None
        if config.attention_sinks:  # fp32, as the kernels read them; this rank's heads
            self.sinks = nn.Parameter(torch.empty(self.num_heads, dtype=torch.float32))
            self.sinks.tp_dim = 0
        if config.qk_norm:
            self.q_norm = make_norm(config, self.head_dim, ops)
            self.k_norm = make_norm(config, self.head_dim, ops)
        self.qk_norm = config.qk_norm
        self.ops = ops
        # Bound by the model runner once the KV pool exists: [num_blocks, block_size, kv_heads, head_dim].
        self.k_cache = self.v_cache = torch.empty(0)
        # An FP8 cache's scales: the checkpoint's (set by the loader) or 1.0; Python floats, so a
        # step reads them without a device sync.
        self.k_scale = self.v_scale = 1.0

    @property
    def kv_shape(self) -> KVShape:
        return KVShape(self.num_kv_heads, self.head_dim)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, attn: AttentionMetadata,
                rope_cache: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).split([self.q_width, self.kv_size, self.kv_size], dim=-1)
        gate = None
        if self.output_gate:
            q, gate = q.reshape(-1, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = q.reshape(-1, self.num_heads, self.head_dim)
        k = k.reshape(-1, self.num_kv_heads, self.head_dim)
        v = v.reshape(-1, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.head_dim)).view_as(q)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view_as(k)
        # q and k stay views of the fused projection: every kernel takes their strides.
        rotary = rope_cache.shape[-1]  # partial rotary turns only the first dimensions of each head; 0: none
        if rotary:
            self.ops.rotary(positions, q[..., :rotary], k[..., :rotary], rope_cache)
        scales = {"k_scale": self.k_scale, "v_scale": self.v_scale}
        self.ops.store_kv(k, v, self.k_cache, self.v_cache, attn.slot_mapping, **scales)
        out = self.ops.paged_attention(q, self.k_cache, self.v_cache, attn.query_start_loc,
                                       attn.seq_lens, attn.block_tables, self.scale,
                                       max_query_len=attn.max_query_len, max_seq_len=attn.max_seq_len,
                                       min_query_len=attn.min_query_len, sliding_window=self.sliding_window,
                                       sinks=self.sinks, key=k, value=v, **scales)
        out = out.reshape(-1, self.q_size)
        if gate is not None:
            out = out * torch.sigmoid(gate.reshape(-1, self.q_size))
        return self.o_proj(out)


def make_mlp(config: ModelConfig, layer: int, ops: KernelOps, tp: TensorParallel) -> nn.Module:
    """Layer ``layer``'s MLP: the sparse mixture of experts where the config says so, else the dense one."""
    moe = config.moe
    if not config.is_sparse(layer):
        return MLP(config.hidden_size, config.intermediate_size, ops, tp, MLP_COLUMNS)
    return SparseMoeBlock(config.hidden_size, moe.num_experts, moe.intermediate_size, moe.routing, ops, tp,
                          moe.shared_intermediate_size, moe.shared_gated, moe.bias, moe.clamped_swiglu)


def scaled(x: torch.Tensor, multiplier: float) -> torch.Tensor:
    """Granite's multipliers; the other families' 1.0 costs no pass over the tensor."""
    return x if multiplier == 1.0 else x * multiplier



# Each recurrent layer shape's token mixer.
_RECURRENT_MIXERS = {GatedDeltaNetShape: GatedDeltaNet, Mamba2Shape: Mamba2Mixer, ShortConvShape: ShortConv}


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, ops: KernelOps, tp: TensorParallel):
        super().__init__()
        self.input_layernorm = make_norm(config, config.hidden_size, ops)
        # The token mixer: attention, or a hybrid's recurrent layer (its state in the engine's pool).
        self.self_attn = self.linear_attn = None
        if config.is_linear_attention(layer):
            mixer = config.hybrid.mixer
            self.linear_attn = _RECURRENT_MIXERS[type(mixer)](mixer)
        elif config.mla is not None:
            self.self_attn = MLAttention(config.mla, ops, tp)
        else:
            self.self_attn = Attention(config, layer, ops, tp)
        self.post_attention_layernorm = make_norm(config, config.hidden_size, ops)
        self.mlp = make_mlp(config, layer, ops, tp)
        self.residual_multiplier = config.residual_multiplier

    def forward(self, positions, hidden, residual, attn, rope_cache):
        if residual is None:
            hidden, residual = self.input_layernorm(hidden), hidden
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        if self.linear_attn is not None:
            hidden = self.linear_attn(hidden, attn)
        else:
            hidden = self.self_attn(positions, hidden, attn, rope_cache)
        hidden, residual = self.post_attention_layernorm(scaled(hidden, self.residual_multiplier), residual)
        return scaled(self.mlp(hidden), self.residual_multiplier), residual


class DecoderModel(nn.Module):
    def __init__(self, config: ModelConfig, ops: KernelOps, tp: TensorParallel):
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, tp)
        self.layers = nn.ModuleList(DecoderLayer(config, i, ops, tp) for i in range(config.num_layers))
        self.norm = make_norm(config, config.hidden_size, ops)
        self.embedding_multiplier = config.embedding_multiplier

    def forward(self, input_ids, positions, attn, rope_cache):
        hidden, residual = scaled(self.embed_tokens(input_ids), self.embedding_multiplier), None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual, attn, rope_cache)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class CausalLM(nn.Module):
    """Hidden states for every new token; logits only for the rows the sampler needs. The decoder carries the
    head its checkpoint names (config.head): an LM head, a sequence-classification ``score`` head, or none."""

    def __init__(self, config: ModelConfig, ops: KernelOps, max_position: int, tp: TensorParallel = SINGLE):
        super().__init__()
        check_splits(config, tp)
        self.config = config
        self.tp = tp
        self.model = DecoderModel(config, ops, tp)
        if config.head == "lm":
            self.lm_head = ParallelLMHead(config.hidden_size, config.vocab_size, tp)
        if config.head == "classifier":  # a few rows: every rank holds all of them
            self.score = nn.Linear(config.hidden_size, len(config.labels), bias=False)
        self._tie_embeddings()
        self.max_position = max_position
        self.register_buffer("rope_cache", self._rope_table(), persistent=False)

    def _rope_table(self) -> torch.Tensor:
        config = self.config
        return cos_sin_cache(config.rotary_dim, self.max_position, config.rope_theta, config.rope_scaling)

    def materialize(self, device: torch.device) -> None:
        """Give a model built on the meta device real, empty parameters on ``device`` for the loader to
        fill, its tied embeddings tied again, its rotary table, and each parameter's ``tp_dim`` (new
        tensors do not carry it over)."""
        splits = {name: param.tp_dim for name, param in self.named_parameters() if hasattr(param, "tp_dim")}
        self.to_empty(device=device)
        params = dict(self.named_parameters())
        for name, dim in splits.items():
            params[name].tp_dim = dim
        self._tie_embeddings()
        with torch.device(device):
            self.rope_cache = self._rope_table()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                attn: AttentionMetadata) -> torch.Tensor:  # [T] -> hidden [T, hidden]
        return self.model(input_ids, positions, attn, self.rope_cache)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """[N, hidden] -> [N, vocab] fp32 on rank 0; None on the other ranks."""
        logits = self.lm_head(hidden)
        return None if logits is None else scaled(logits.float(), 1 / self.config.logits_scaling)

    def classify(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> [N, num_labels] fp32: the classification head's logits (any rank)."""
        return self.score(hidden).float()

    def _tie_embeddings(self) -> None:
        if self.config.head == "lm" and self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def attention_layers(self) -> list[Attention | MLAttention]:
        return [layer.self_attn for layer in self.model.layers if layer.self_attn is not None]

    def recurrent_layers(self) -> list[nn.Module]:
        """The layers whose per-sequence state lives in the engine's state pool (a hybrid's)."""
        return [layer.linear_attn for layer in self.model.layers if layer.linear_attn is not None]

    def kv_shapes(self) -> list[KVShape]:
        """Each attention layer's cache on this rank."""
        return [layer.kv_shape for layer in self.attention_layers()]
