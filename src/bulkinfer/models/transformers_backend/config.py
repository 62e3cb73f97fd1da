"""What bulkinfer needs to know of a model it runs through transformers, and whether it can: from its
config alone, before any weight is read."""

from __future__ import annotations

import sys
from pathlib import Path

from bulkinfer.models.config import ModelConfig, UnsupportedModelError, checkpoint_dtype


def transformers_model_config(path: Path, hf: dict) -> ModelConfig:
    """The ModelConfig of a checkpoint transformers builds; refuses, in one line, one it cannot run here."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    names = ", ".join(hf.get("architectures") or ()) or f"model_type {hf.get('model_type')!r}"
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (ValueError, KeyError) as exc:  # a model_type this transformers does not know
        raise UnsupportedModelError(f"unsupported architecture {names}: transformers {transformers.__version__} "
                                    f"cannot read its config ({str(exc).splitlines()[0]})") from None
    if config.get_text_config() is not config:
        raise UnsupportedModelError(f"unsupported architecture {names}: a multimodal checkpoint; bulkinfer runs "
                                    "text-only causal LMs")
    model_class = AutoModelForCausalLM._model_mapping.get(type(config), None)
    if model_class is None:
        raise UnsupportedModelError(f"unsupported architecture {names}: transformers has no causal-LM class for "
                                    f"model_type {config.model_type!r}")
    if not _uses_attention_interface(model_class):
        raise UnsupportedModelError(f"unsupported architecture {names}: its attention does not go through "
                                    "transformers' attention interface, so it cannot run on the paged cache")
    return _model_config(model_class.__name__, config, hf)


def _uses_attention_interface(model_class: type) -> bool:
    """transformers flags the models it tested with custom attention backends. Some others dispatch attention
    through the same interface without the flag (StableLM, Qwen3.5's attention layers in 5.24): their modeling
    module imports it. The load-time probe then checks that every layer's attention really comes to bulkinfer."""
    return model_class.is_backend_compatible() or hasattr(sys.modules[model_class.__module__],
                                                          "ALL_ATTENTION_FUNCTIONS")


def _largest(config, name: str) -> int | None:
    """A size the engine plans memory with. Some families vary it by layer (Gemma 4's head_dim), and reading
    it from the whole config is then an error in transformers: the largest layer's is the safe plan."""
    layers = getattr(config, "per_layer_config", None)
    if layers is None:
        return getattr(config, name, None)
    return max((getattr(layers[i], name, None) or 0 for i in range(config.num_hidden_layers)), default=0) or None


def _cache_head_size(config) -> int:
    """The head size of the paged cache's keys and values. Multi-head latent attention's keys (``qk_head_dim``,
    rotary and not) and values (``v_head_dim``) differ, and the cache holds both at the larger (attention.py);
    its ``head_dim`` is then the rotary part alone."""
    head_dim = _largest(config, "head_dim") or config.hidden_size // config.num_attention_heads
    return max(getattr(config, "qk_head_dim", None) or head_dim, getattr(config, "v_head_dim", None) or 0)


def _model_config(architecture: str, config, hf: dict) -> ModelConfig:
    """The sizes the engine plans memory with; the model's own code reads everything else."""
    heads, hidden = config.num_attention_heads, config.hidden_size
    rope = getattr(config, "rope_parameters", None) or {}
    return ModelConfig(
        architecture=architecture,
        vocab_size=config.vocab_size,
        hidden_size=hidden,
        intermediate_size=getattr(config, "intermediate_size", None) or 4 * hidden,
        num_layers=config.num_hidden_layers,
        num_heads=heads,
        num_kv_heads=_largest(config, "num_key_value_heads") or heads,
        head_dim=_cache_head_size(config),
        rms_norm_eps=getattr(config, "rms_norm_eps", None) or 1e-6,
        rope_theta=rope.get("rope_theta", 10000.0) if isinstance(rope, dict) else 10000.0,
        rope_scaling=None,
        max_position_embeddings=getattr(config, "max_position_embeddings", None) or 2048,
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        qkv_bias=False,
        qk_norm=False,
        torch_dtype=checkpoint_dtype(hf.get("dtype") or hf.get("torch_dtype")),
        sliding_window=None,  # windows are each layer's own, and the paged kernels apply them
        implementation="transformers",
    )
