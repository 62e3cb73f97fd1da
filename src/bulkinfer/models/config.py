"""The architecture settings we read from a Hugging Face config.json."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Architecture name in config.json -> which optional parts of the shared decoder it switches on.
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": {},
    "MistralForCausalLM": {},
    "Qwen2ForCausalLM": {"qkv_bias": True},
    "Qwen3ForCausalLM": {"qk_norm": True},
}


class UnsupportedModelError(ValueError):
    pass


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
    sliding_window: int | None

    @classmethod
    def from_hf(cls, hf: dict) -> "ModelConfig":
        architecture = _architecture(hf)
        parts = SUPPORTED_ARCHITECTURES[architecture]
        num_heads = hf["num_attention_heads"]
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
            qkv_bias=parts.get("qkv_bias", False) or hf.get("attention_bias", False),
            qk_norm=parts.get("qk_norm", False),
            torch_dtype=_dtype(hf.get("dtype") or hf.get("torch_dtype")),
            sliding_window=_sliding_window(hf),
        )


def _architecture(hf: dict) -> str:
    names = hf.get("architectures") or []
    for name in names:
        if name in SUPPORTED_ARCHITECTURES:
            return name
    raise UnsupportedModelError(
        f"unsupported architecture {', '.join(names) or '(none given in config.json)'}; "
        f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")


def _dtype(name: str | None) -> torch.dtype:
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(name or "float32", torch.float32)


def _sliding_window(hf: dict) -> int | None:
    # Qwen2/3 configs carry a window they do not use unless use_sliding_window is set.
    if "use_sliding_window" in hf and not hf["use_sliding_window"]:
        return None
    return hf.get("sliding_window")
