"""The architecture settings we read from a Hugging Face config.json."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.layers.gated_delta_net import GatedDeltaNetShape
from bulkinfer.layers.mamba2 import Mamba2Shape
from bulkinfer.layers.moe import SCORING_FUNCS, TOPK_METHODS, Routing
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.layers.mla import MLAShape
from bulkinfer.layers.rotary import softmax_mscale
from bulkinfer.layers.short_conv import ShortConvShape
from bulkinfer.models.lfm2 import lfm2_keys
from bulkinfer.models.quantization.config import QuantizationConfig, quantization_from_hf
from bulkinfer.models.refusal import UnsupportedModelError


# The dense families, by the prefix of their architecture names, and the decoder parts each switches on.
_DENSE_FAMILIES = {"Llama": {}, "Mistral": {}, "Qwen2": {"qkv_bias": True}, "Qwen3": {"qk_norm": True}}
# What sits on the decoder: an LM head ("lm"), a sequence-classification head ("classifier", transformers'
# `score` over the last token) or nothing ("none": a bare `*Model` checkpoint, which embeds).
HEADS = ("lm", "classifier", "none")
# Architecture name in config.json -> which optional parts of the shared decoder it switches on.
SUPPORTED_ARCHITECTURES = {
    **{f"{family}ForCausalLM": parts for family, parts in _DENSE_FAMILIES.items()},
    **{f"{family}ForSequenceClassification": {**parts, "head": "classifier"}
       for family, parts in _DENSE_FAMILIES.items()},
    **{f"{family}Model": {**parts, "head": "none"} for family, parts in _DENSE_FAMILIES.items()},
    "MixtralForCausalLM": {"moe": "mixtral"},
    "Qwen2MoeForCausalLM": {"qkv_bias": True, "moe": "qwen2_moe"},
    "Qwen3MoeForCausalLM": {"qk_norm": True, "moe": "qwen3_moe"},
    # Sliding and full layers by config.layer_types, a sink per head, biased projections, biased experts.
    "GptOssForCausalLM": {"moe": "gpt_oss", "layer_windows": True, "attention_sinks": True, "o_bias": True},
    # Hybrids: gated delta-net layers beside gated full attention (Qwen3-Next's projections grouped by key head).
    "Qwen3NextForCausalLM": {"qk_norm": True, "moe": "qwen3_next", "hybrid": "qwen3_next"},
    "Qwen3_5ForCausalLM": {"qk_norm": True, "hybrid": "qwen3_5"},
    "Qwen3_5MoeForCausalLM": {"qk_norm": True, "moe": "qwen3_5_moe", "hybrid": "qwen3_5"},
    # Mamba2 layers beside plain attention (RoPE or none), routed experts beside an ungated shared MLP (or the
    # shared MLP alone), Granite's multipliers; its dense MLP is the shared one.
    "GraniteMoeHybridForCausalLM": {"moe": "granitemoehybrid", "hybrid": "granitemoehybrid",
                                    "mlp_size": "shared_intermediate_size"},
    # Multi-head latent attention over a cache of latent rows (layers/mla.py); Kimi K2 ships as DeepSeek-V3.
    "DeepseekV2ForCausalLM": {"moe": "deepseek_v2", "mla": True},
    "DeepseekV3ForCausalLM": {"moe": "deepseek_v3", "mla": True},
    # Short-convolution layers beside plain attention with q/k norms (models/lfm2.py translates its keys).
    "Lfm2ForCausalLM": {"qk_norm": True, "hybrid": "lfm2"},
    "Lfm2MoeForCausalLM": {"qk_norm": True, "hybrid": "lfm2", "moe": "lfm2_moe"},
}
# gpt-oss ships its experts in MXFP4, which the model keeps (models/loader.py: keeps_mxfp4).
_MXFP4_EXPERTS = {("GptOssForCausalLM", "mxfp4")}
# Architectures whose checkpoint names the loader maps for plain weights only (models/granite_weights.py).
_PLAIN_WEIGHTS_ONLY = {"GraniteMoeHybridForCausalLM"}


@dataclass(frozen=True)
class MoEConfig:
    """The sparse MLP of a mixture-of-experts family; layers not in ``sparse_layers`` have a dense MLP."""

    num_experts: int
    intermediate_size: int  # each expert's
    routing: Routing
    shared_intermediate_size: int  # the shared expert's (Qwen2-MoE's, or DeepSeek's n_shared_experts together); 0: none
    sparse_layers: frozenset[int]
    shared_gated: bool = True  # Qwen2-MoE scales its shared expert by a sigmoid gate; DeepSeek and Granite do not
    bias: bool = False  # gpt-oss: the router and every expert projection have a bias
    clamped_swiglu: tuple[float, float] | None = None  # gpt-oss's activation (limit, alpha); None: SiLU and multiply

    @classmethod
    def from_hf(cls, family: str, hf: dict) -> "MoEConfig":
        """Each family's keys, with transformers' defaults for the optional ones."""
        if family in _DEEPSEEK_DEFAULTS:
            return _deepseek_moe(family, hf)
        layers = range(hf["num_hidden_layers"])
        # Recent transformers write Qwen3-MoE's num_experts under Mixtral's name.
        num_experts = hf["num_local_experts"] if "num_local_experts" in hf else hf["num_experts"]
        top_k = hf["num_experts_per_tok"]
        if family == "mixtral":  # every layer sparse, weights always renormalized
            return cls(num_experts, hf["intermediate_size"], Routing(top_k, True), 0, frozenset(layers))
        if family == "granitemoehybrid":  # a softmax over the top-k logits: the top-k of the softmax, renormalized
            return cls(num_experts, hf["intermediate_size"], Routing(top_k, True), hf["shared_intermediate_size"],
                       frozenset(layers if num_experts else ()), shared_gated=False)
        if family == "lfm2_moe":  # sigmoid scores, an expert bias that only chooses; dense MLPs in the first layers
            bias = hf.get("use_expert_bias", True)
            routing = Routing(top_k, hf.get("norm_topk_prob", True), "sigmoid", "noaux_tc" if bias else "greedy",
                              scaling=hf.get("routed_scaling_factor", 1.0))
            return cls(num_experts, hf["moe_intermediate_size"], routing, 0,
                       frozenset(layers[hf.get("num_dense_layers", 2):]))
        if family == "gpt_oss":  # a softmax over the top-k logits: the top-k of the softmax, renormalized
            return cls(num_experts, hf["intermediate_size"], Routing(top_k, True), 0, frozenset(layers), bias=True,
                       clamped_swiglu=(hf.get("swiglu_limit", 7.0), hf.get("swiglu_alpha", 1.702)))
        # Qwen2-MoE and Qwen3-MoE: a layer is sparse every decoder_sparse_step layers, unless listed dense.
        step, dense = hf.get("decoder_sparse_step", 1), set(hf.get("mlp_only_layers") or ())
        sparse = {i for i in layers if i not in dense and num_experts > 0 and (i + 1) % step == 0}
        # Qwen2-MoE, Qwen3-Next and Qwen3.5-MoE have a shared expert; Qwen3.5-MoE always renormalizes.
        shared = hf.get("shared_expert_intermediate_size", 5632 if family == "qwen2_moe" else 0)
        routing = Routing(top_k, hf.get("norm_topk_prob", family == "qwen3_5_moe"))
        return cls(num_experts, hf["moe_intermediate_size"], routing, shared, frozenset(sparse))


# transformers' defaults for the DeepSeek keys a config.json may leave out (it writes no scoring_func or
# topk_method for V3: the released checkpoints' sigmoid and noaux_tc are its only routing).
_DEEPSEEK_DEFAULTS = {
    "deepseek_v2": dict(scoring_func="softmax", topk_method="greedy", norm_topk_prob=False, routed_scaling_factor=1.0,
                        n_group=1, topk_group=1, first_k_dense_replace=0, n_shared_experts=2),
    "deepseek_v3": dict(scoring_func="sigmoid", topk_method="noaux_tc", norm_topk_prob=True, routed_scaling_factor=2.5,
                        n_group=8, topk_group=4, first_k_dense_replace=3, n_shared_experts=1),
}


def _deepseek_moe(family: str, hf: dict) -> MoEConfig:
    """DeepSeek-V2/V3 (and Kimi K2): a layer is sparse from first_k_dense_replace on, every moe_layer_freq
    layers; its shared experts, ungated, are one MLP of n_shared_experts * moe_intermediate_size columns.
    With norm_topk_prob the weights are renormalized, then scaled by routed_scaling_factor, as in V3 (V2's
    released checkpoints all leave norm_topk_prob off)."""
    keys = {key: default if hf.get(key) is None else hf[key] for key, default in _DEEPSEEK_DEFAULTS[family].items()}
    scoring, method, num_experts = keys["scoring_func"], keys["topk_method"], hf["n_routed_experts"]
    if scoring not in SCORING_FUNCS:
        raise UnsupportedModelError(f"{family} with scoring_func {scoring!r}: bulkinfer scores experts by "
                                    f"{' or '.join(SCORING_FUNCS)}")
    if method not in TOPK_METHODS:
        raise UnsupportedModelError(f"{family} with topk_method {method!r}: bulkinfer routes by "
                                    f"{', '.join(TOPK_METHODS)}")
    groups = 1 if method == "greedy" else keys["n_group"]  # greedy routing ignores the groups
    if num_experts % groups:
        raise UnsupportedModelError(f"{family} with {num_experts} experts in n_group={groups}: the groups "
                                    "must be equal")
    routing = Routing(hf["num_experts_per_tok"], keys["norm_topk_prob"], scoring, method, groups,
                      keys["topk_group"] if groups > 1 else 1, keys["routed_scaling_factor"])
    first, every = keys["first_k_dense_replace"], hf.get("moe_layer_freq") or 1
    sparse = frozenset(i for i in range(hf["num_hidden_layers"]) if i >= first and i % every == 0)
    shared = keys["n_shared_experts"] * hf["moe_intermediate_size"]
    return MoEConfig(num_experts, hf["moe_intermediate_size"], routing, shared, sparse, shared_gated=False)


def _mla_shape(hf: dict, scaling: dict | None, interleaved: bool) -> MLAShape:
    """DeepSeek's latent attention sizes; its softmax scale takes YaRN's mscale, as transformers applies it."""
    qk_head_dim = hf["qk_nope_head_dim"] + hf["qk_rope_head_dim"]
    return MLAShape(hf["hidden_size"], hf["num_attention_heads"], hf.get("q_lora_rank") or 0, hf["kv_lora_rank"],
                    hf["qk_nope_head_dim"], hf["qk_rope_head_dim"], hf["v_head_dim"],
                    qk_head_dim ** -0.5 * softmax_mscale(scaling), interleaved, bool(hf.get("attention_bias")))


@dataclass(frozen=True)
class HybridConfig:
    """Recurrent token mixers among full-attention layers: Qwen3-Next's and Qwen3.5's gated delta-nets, Granite
    4.0-H's Mamba2 layers, or LFM2's short convolutions. Their state lives in the engine's state pool."""

    linear_layers: frozenset[int]
    mixer: GatedDeltaNetShape | Mamba2Shape | ShortConvShape  # every recurrent layer's; its type says which mixer

    @classmethod
    def from_hf(cls, family: str, hf: dict) -> "HybridConfig":
        if family == "granitemoehybrid":  # older configs name the kinds "mamba" and "attention"
            kinds = hf.get("layer_types") or hf["layers_block_type"]
            return cls(frozenset(i for i, kind in enumerate(kinds) if kind in ("mamba", "linear_attention")),
                       _mamba2_shape(hf))
        if family == "lfm2":
            conv = ShortConvShape(hf["hidden_size"], hf.get("conv_L_cache", 3), hf.get("conv_bias", False))
            return cls(frozenset(i for i, kind in enumerate(hf["layer_types"]) if kind == "conv"), conv)
        kinds = hf.get("layer_types") or ["full_attention" if (i + 1) % hf.get("full_attention_interval", 4) == 0
                                          else "linear_attention" for i in range(hf["num_hidden_layers"])]
        shape = GatedDeltaNetShape(hf["hidden_size"], hf["linear_num_key_heads"], hf["linear_num_value_heads"],
                                   hf["linear_key_head_dim"], hf["linear_value_head_dim"],
                                   hf["linear_conv_kernel_dim"], hf.get("rms_norm_eps", 1e-6),
                                   grouped_projections=family == "qwen3_next")
        return cls(frozenset(i for i, kind in enumerate(kinds) if kind == "linear_attention"), shape)


def _mamba2_shape(hf: dict) -> Mamba2Shape:
    """Granite 4.0-H's Mamba2 layers, with transformers' defaults for the optional keys."""
    heads, inner = hf.get("mamba_n_heads", 128), hf.get("mamba_expand", 2) * hf["hidden_size"]
    head_dim = hf.get("mamba_d_head", "auto")
    if tuple(_json_float(bound) for bound in hf.get("time_step_limit") or (0, "inf")) != (0, float("inf")):
        raise UnsupportedModelError(f"GraniteMoeHybridForCausalLM with time_step_limit {hf['time_step_limit']}: "
                                    "bulkinfer's Mamba2 scan does not clamp its time steps")
    return Mamba2Shape(hf["hidden_size"], heads, inner // heads if head_dim == "auto" else head_dim,
                       hf.get("mamba_n_groups", 1), hf.get("mamba_d_state", 256), hf.get("mamba_d_conv", 4),
                       hf.get("rms_norm_eps", 1e-6), hf.get("mamba_conv_bias", True), hf.get("mamba_proj_bias", False))


def _json_float(value) -> float:
    """A number from config.json, where transformers writes a non-finite float as {"__float__": "Infinity"}."""
    return float(value["__float__"] if isinstance(value, dict) else value)


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    torch_dtype: torch.dtype
    sliding_window: int | None  # every layer's window; None: none, or each layer's own (layer_windows)
    moe: MoEConfig | None = None  # None: a dense model
    implementation: str = "native"  # whose code runs it: "native" (models/llama.py) or "transformers"
    quantization: QuantizationConfig | None = None  # None: plain weights
    head: str = "lm"  # one of HEADS
    labels: tuple[str, ...] = ()  # a classifier's label names, by index (id2label)
    layer_windows: tuple[int, ...] = ()  # each layer's sliding window, 0 for a full layer (gpt-oss); () for none
    attention_sinks: bool = False  # a learned sink logit per head in every layer (gpt-oss)
    o_bias: bool = False  # the attention output projection has a bias
    mxfp4_experts: bool = False  # experts stored in MXFP4 (the quantization config describes nothing else)
    hybrid: HybridConfig | None = None  # None: every layer is attention
    partial_rotary_factor: float = 1.0  # the share of each head that rotary embedding turns (0: no rotary)
    # Granite's multipliers: on the embeddings, on each attention (or mixer) and MLP output before its residual
    # add, the softmax scale (None: head_dim ** -0.5), and the logits' divisor.
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float | None = None
    logits_scaling: float = 1.0
    mla: MLAShape | None = None  # multi-head latent attention in every layer (DeepSeek); None: heads of keys/values

    def window(self, layer: int) -> int:
        """Layer ``layer``'s sliding window for the attention kernels; 0 for none."""
        return self.layer_windows[layer] if self.layer_windows else 0

    @property
    def rotary_dim(self) -> int:
        if self.mla is not None:
            return self.mla.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def kv_shape(self) -> KVShape:
        """An attention layer's cache over all ranks: a latent row, or keys and values for every KV head."""
        if self.mla is not None:
            return KVShape(1, self.mla.row_width, planes=1)
        return KVShape(self.num_kv_heads, self.head_dim)

    @property
    def num_attention_layers(self) -> int:
        """The layers with a KV cache (a hybrid's delta-net layers keep a fixed state instead)."""
        return self.num_layers - (len(self.hybrid.linear_layers) if self.hybrid is not None else 0)

    @property
    def qwen_hybrid(self) -> bool:
        """Qwen3-Next and Qwen3.5 (gated delta-nets): attention gates its output, RMSNorms scale by 1 + weight."""
        return self.hybrid is not None and isinstance(self.hybrid.mixer, GatedDeltaNetShape)

    def is_linear_attention(self, layer: int) -> bool:
        return self.hybrid is not None and layer in self.hybrid.linear_layers

    def is_sparse(self, layer: int) -> bool:
        return self.moe is not None and layer in self.moe.sparse_layers

    @classmethod
    def from_hf(cls, hf: dict) -> "ModelConfig":
        architecture = _architecture(hf)
        if hf.get("is_causal") is False:  # gte-Qwen2's embedding checkpoints: every token sees every other
            raise UnsupportedModelError(f"{architecture} with bidirectional attention (is_causal false): "
                                        "bulkinfer's attention is causal")
        parts = SUPPORTED_ARCHITECTURES[architecture]
        if parts.get("mla") and quantization_from_hf(hf):  # the absorbed decode reads kv_b's plain weight
            raise UnsupportedModelError(f"quantized {architecture}: bulkinfer's latent attention runs plain "
                                        "(float16, bfloat16, float32) weights")
        if parts.get("hybrid") == "lfm2":
            hf = lfm2_keys(hf, moe="moe" in parts)
        num_heads = hf["num_attention_heads"]
        method = (hf.get("quantization_config") or {}).get("quant_method")
        mxfp4_experts = (architecture, method) in _MXFP4_EXPERTS
        if method and architecture in _PLAIN_WEIGHTS_ONLY:
            raise UnsupportedModelError(f"quantized {architecture} ({method}): bulkinfer runs it from plain weights "
                                        "only")
        windows = _layer_windows(hf) if parts.get("layer_windows") else ()
        rope = hf.get("rope_parameters") or {}  # transformers >= 5 keeps theta and scaling here
        scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        return cls(
            architecture=architecture,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf[parts.get("mlp_size", "intermediate_size")],
            num_layers=hf["num_hidden_layers"],
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=hf.get("rope_theta") or rope.get("rope_theta", 10000.0),
            rope_scaling=scaling,
            max_position_embeddings=hf.get("max_position_embeddings", 2048),
            tie_word_embeddings=hf.get("tie_word_embeddings", False),
            qkv_bias=hf.get("qkv_bias", parts.get("qkv_bias", False)) or hf.get("attention_bias", False),
            qk_norm=parts.get("qk_norm", False),
            torch_dtype=checkpoint_dtype(hf.get("dtype") or hf.get("torch_dtype")),
            sliding_window=None if windows else _sliding_window(hf),
            moe=MoEConfig.from_hf(parts["moe"], hf) if "moe" in parts else None,
            quantization=None if mxfp4_experts else quantization_from_hf(hf),
            head=parts.get("head", "lm"),
            labels=_labels(hf) if parts.get("head") == "classifier" else (),
            layer_windows=windows,
            attention_sinks=parts.get("attention_sinks", False),
            o_bias=parts.get("o_bias", False),
            mxfp4_experts=mxfp4_experts,
            hybrid=HybridConfig.from_hf(parts["hybrid"], hf) if "hybrid" in parts else None,
            partial_rotary_factor=_partial_rotary_factor(hf, rope),
            embedding_multiplier=hf.get("embedding_multiplier", 1.0),
            residual_multiplier=hf.get("residual_multiplier", 1.0),
            attention_multiplier=hf.get("attention_multiplier"),
            logits_scaling=hf.get("logits_scaling", 1.0),
            # DeepSeek-V2 always pairs rotary values side by side; V3 unless rope_interleave is false.
            mla=_mla_shape(hf, scaling, hf.get("rope_interleave", True)) if parts.get("mla") else None,
        )


def _partial_rotary_factor(hf: dict, rope: dict) -> float:
    if hf.get("position_embedding_type", "rope") != "rope":  # Granite 4.0-H: "nope", no position embedding at all
        return 0.0
    return hf.get("partial_rotary_factor") or rope.get("partial_rotary_factor", 1.0)


def native_architecture(hf: dict) -> str | None:
    """The architecture named in config.json that bulkinfer has its own code for, if any."""
    return next((name for name in hf.get("architectures") or () if name in SUPPORTED_ARCHITECTURES), None)


def _architecture(hf: dict) -> str:
    name = native_architecture(hf)
    if name is None:
        names = ", ".join(hf.get("architectures") or ()) or "(none given in config.json)"
        raise UnsupportedModelError(f"no native implementation of {names}: bulkinfer's own code runs "
                                    f"{', '.join(SUPPORTED_ARCHITECTURES)}; model_impl='transformers' (or 'auto') "
                                    "runs other causal LMs through transformers")
    return name


def _labels(hf: dict) -> tuple[str, ...]:
    """A classifier's label names by index: id2label where config.json has it (transformers always writes it),
    else LABEL_i for num_labels of them."""
    id2label = hf.get("id2label") or {str(i): f"LABEL_{i}" for i in range(hf.get("num_labels", 2))}
    return tuple(id2label[str(i)] for i in range(len(id2label)))


def checkpoint_dtype(name: str | None) -> torch.dtype:
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(name or "float32", torch.float32)


def _layer_windows(hf: dict) -> tuple[int, ...]:
    """config.layer_types: "sliding_attention" layers see sliding_window tokens, the others all."""
    window = hf.get("sliding_window") or 0
    return tuple(window if kind == "sliding_attention" else 0 for kind in hf["layer_types"])


def _sliding_window(hf: dict) -> int | None:
    # Qwen2/3 configs carry a window they do not use unless use_sliding_window is set.
    if "use_sliding_window" in hf and not hf["use_sliding_window"]:
        return None
    return hf.get("sliding_window")
