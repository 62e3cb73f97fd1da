"""The architecture settings we read from a Hugging Face config.json."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.layers.gated_delta_net import GatedDeltaNetShape
from bulkinfer.layers.moe import SigmoidRouting
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
    # Short-convolution layers beside plain attention with q/k norms (models/lfm2.py translates its keys).
    "Lfm2ForCausalLM": {"qk_norm": True, "hybrid": "lfm2"},
    "Lfm2MoeForCausalLM": {"qk_norm": True, "hybrid": "lfm2", "moe": "lfm2_moe"},
}
# gpt-oss ships its experts in MXFP4; the loader dequantizes them (models/gpt_oss_weights.py).
_DEQUANTIZED_AT_LOAD = {("GptOssForCausalLM", "mxfp4")}


@dataclass(frozen=True)
class MoEConfig:
    """The sparse MLP of a mixture-of-experts family; layers not in ``sparse_layers`` have a dense MLP."""

    num_experts: int
    top_k: int
    intermediate_size: int  # each expert's
    normalize: bool  # the top-k router weights renormalized to sum to 1
    shared_intermediate_size: int  # Qwen2-MoE's shared expert; 0 for none
    sparse_layers: frozenset[int]
    bias: bool = False  # gpt-oss: the router and every expert projection have a bias
    clamped_swiglu: tuple[float, float] | None = None  # gpt-oss's activation (limit, alpha); None: SiLU and multiply
    sigmoid_routing: SigmoidRouting | None = None  # LFM2-MoE's router; None: a softmax over the experts

    @classmethod
    def from_hf(cls, family: str, hf: dict) -> "MoEConfig":
        """Each family's keys, with transformers' defaults for the optional ones."""
        layers = range(hf["num_hidden_layers"])
        # Recent transformers write Qwen3-MoE's num_experts under Mixtral's name.
        num_experts = hf["num_local_experts"] if "num_local_experts" in hf else hf["num_experts"]
        if family == "mixtral":  # every layer sparse, weights always renormalized
            return cls(num_experts, hf["num_experts_per_tok"], hf["intermediate_size"], True, 0, frozenset(layers))
        if family == "lfm2_moe":  # dense MLPs in the first num_dense_layers layers
            routing = SigmoidRouting(hf.get("use_expert_bias", True), hf.get("routed_scaling_factor", 1.0))
            return cls(num_experts, hf["num_experts_per_tok"], hf["moe_intermediate_size"],
                       hf.get("norm_topk_prob", True), 0, frozenset(layers[hf.get("num_dense_layers", 2):]),
                       sigmoid_routing=routing)
        if family == "gpt_oss":  # a softmax over the top-k logits: the top-k of the softmax, renormalized
            return cls(num_experts, hf["num_experts_per_tok"], hf["intermediate_size"], True, 0, frozenset(layers),
                       bias=True, clamped_swiglu=(hf.get("swiglu_limit", 7.0), hf.get("swiglu_alpha", 1.702)))
        # Qwen2-MoE and Qwen3-MoE: a layer is sparse every decoder_sparse_step layers, unless listed dense.
        step, dense = hf.get("decoder_sparse_step", 1), set(hf.get("mlp_only_layers") or ())
        sparse = {i for i in layers if i not in dense and num_experts > 0 and (i + 1) % step == 0}
        # Qwen2-MoE, Qwen3-Next and Qwen3.5-MoE have a shared expert; Qwen3.5-MoE always renormalizes.
        shared = hf.get("shared_expert_intermediate_size", 5632 if family == "qwen2_moe" else 0)
        return cls(num_experts, hf["num_experts_per_tok"], hf["moe_intermediate_size"],
                   hf.get("norm_topk_prob", family == "qwen3_5_moe"), shared, frozenset(sparse))


@dataclass(frozen=True)
class HybridConfig:
    """Recurrent layers among full-attention ones: Qwen3-Next's and Qwen3.5's gated delta-nets (their attention
    gates its output and their RMSNorms scale by 1 + weight), or LFM2's short convolutions."""

    linear_layers: frozenset[int]  # the layers with a recurrent token mixer instead of attention
    delta_net: GatedDeltaNetShape | None
    short_conv: ShortConvShape | None = None

    @classmethod
    def from_hf(cls, family: str, hf: dict) -> "HybridConfig":
        if family == "lfm2":
            conv = ShortConvShape(hf["hidden_size"], hf.get("conv_L_cache", 3), hf.get("conv_bias", False))
            layers = frozenset(i for i, kind in enumerate(hf["layer_types"]) if kind == "conv")
            return cls(layers, None, conv)
        kinds = hf.get("layer_types") or ["full_attention" if (i + 1) % hf.get("full_attention_interval", 4) == 0
                                          else "linear_attention" for i in range(hf["num_hidden_layers"])]
        shape = GatedDeltaNetShape(hf["hidden_size"], hf["linear_num_key_heads"], hf["linear_num_value_heads"],
                                   hf["linear_key_head_dim"], hf["linear_value_head_dim"],
                                   hf["linear_conv_kernel_dim"], hf.get("rms_norm_eps", 1e-6),
                                   grouped_projections=family == "qwen3_next")
        return cls(frozenset(i for i, kind in enumerate(kinds) if kind == "linear_attention"), shape)


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
    mxfp4_experts: bool = False  # experts stored in MXFP4, dequantized at load
    hybrid: HybridConfig | None = None  # None: every layer is attention
    partial_rotary_factor: float = 1.0  # the share of each head that rotary embedding turns

    def window(self, layer: int) -> int:
        """Layer ``layer``'s sliding window for the attention kernels; 0 for none."""
        return self.layer_windows[layer] if self.layer_windows else 0

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def num_attention_layers(self) -> int:
        """The layers with a KV cache (a hybrid's delta-net layers keep a fixed state instead)."""
        return self.num_layers - (len(self.hybrid.linear_layers) if self.hybrid is not None else 0)

    def is_linear_attention(self, layer: int) -> bool:
        return self.hybrid is not None and layer in self.hybrid.linear_layers

    @property
    def qwen_next_parts(self) -> bool:
        """Gated attention output and 1 + weight RMSNorms, which come with Qwen3-Next's and Qwen3.5's delta-nets."""
        return self.hybrid is not None and self.hybrid.delta_net is not None

    def is_sparse(self, layer: int) -> bool:
        return self.moe is not None and layer in self.moe.sparse_layers

    @classmethod
    def from_hf(cls, hf: dict) -> "ModelConfig":
        architecture = _architecture(hf)
        if hf.get("is_causal") is False:  # gte-Qwen2's embedding checkpoints: every token sees every other
            raise UnsupportedModelError(f"{architecture} with bidirectional attention (is_causal false): "
                                        "bulkinfer's attention is causal")
        parts = SUPPORTED_ARCHITECTURES[architecture]
        if parts.get("hybrid") == "lfm2":
            hf = lfm2_keys(hf, moe="moe" in parts)
        num_heads = hf["num_attention_heads"]
        method = (hf.get("quantization_config") or {}).get("quant_method")
        dequantized = (architecture, method) in _DEQUANTIZED_AT_LOAD
        windows = _layer_windows(hf) if parts.get("layer_windows") else ()
        rope = hf.get("rope_parameters") or {}  # transformers >= 5 keeps theta and scaling here
        scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default" else None)
        return cls(
            architecture=architecture,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
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
            quantization=None if dequantized else quantization_from_hf(hf),
            head=parts.get("head", "lm"),
            labels=_labels(hf) if parts.get("head") == "classifier" else (),
            layer_windows=windows,
            attention_sinks=parts.get("attention_sinks", False),
            o_bias=parts.get("o_bias", False),
            mxfp4_experts=dequantized,
            hybrid=HybridConfig.from_hf(parts["hybrid"], hf) if "hybrid" in parts else None,
            partial_rotary_factor=hf.get("partial_rotary_factor") or rope.get("partial_rotary_factor", 1.0),
        )


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
