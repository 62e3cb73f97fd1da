"""Why a checkpoint bulkinfer cannot run is refused, read from its JSON files alone, before anything loads.

A user who brings an unsupported model should learn in one line why: an encoder-decoder, no causal LM head,
recurrent state beside the KV cache, or code that only the checkpoint itself carries (modeling files, a
tokenizer class of its own). bulkinfer never runs a checkpoint's code: a checkpoint is data from strangers.
"""

from __future__ import annotations

import json
from pathlib import Path


class UnsupportedModelError(ValueError):
    """A checkpoint bulkinfer will not run, with the one-line reason."""

# Layer kinds that keep a recurrent state instead of (or beside) a KV cache.
_RECURRENT_LAYER_KINDS = ("mamba", "linear_attention", "recurrent", "ssm", "rwkv", "conv")
_RECURRENT_MODEL_TYPES = ("mamba", "mamba2", "rwkv", "jamba", "zamba", "zamba2", "falcon_h1", "bamba",
                          "nemotron_h", "qwen3_next", "lfm2", "lfm2_moe", "recurrent_gemma", "xlstm")


def refusal_reason(hf: dict) -> str | None:
    """Why a model cannot run on a paged KV cache at all, most fundamental first; None if it may."""
    names = hf.get("architectures") or []
    if hf.get("is_encoder_decoder"):
        return "an encoder-decoder model (bulkinfer runs decoder-only causal LMs)"
    if names and not any(_is_causal_lm(name) for name in names):
        return "no causal LM head"
    if _is_recurrent(hf):
        return ("hybrid recurrent layers (Mamba, linear attention or short convolutions) need the recurrent state "
                "pool, which only bulkinfer's own code has: it runs Qwen3-Next, Qwen3.5, Granite 4.0-H "
                "and LFM2 (model_impl auto or native)")
    if hf.get("auto_map"):
        return "remote code (its own modeling files), which bulkinfer does not run"
    return None


def _is_causal_lm(name: str) -> bool:
    return name.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration"))


def _is_recurrent(hf: dict) -> bool:
    if (hf.get("model_type") or "") in _RECURRENT_MODEL_TYPES:
        return True
    kinds = [str(kind) for kind in (hf.get("layer_types") or hf.get("layers_block_type") or ())]
    return any(k in kind for kind in kinds for k in _RECURRENT_LAYER_KINDS)


def refuse_tokenizer_code(path: Path) -> None:
    """Refuses, before anything loads, a tokenizer that only the checkpoint's own Python files could build."""
    reason = _tokenizer_code_reason(path)
    if reason:
        raise UnsupportedModelError(f"unsupported tokenizer: {reason}, and bulkinfer never runs a checkpoint's code")


def _tokenizer_code_reason(path: Path) -> str | None:
    """An ``auto_map`` for the tokenizer (in either file), or a ``tokenizer_class`` transformers does not provide."""
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    configs = {name: _json_object(path / name) for name in ("config.json", "tokenizer_config.json")}
    if "AutoTokenizer" in (configs["config.json"].get("auto_map") or {}):
        return "config.json's auto_map points AutoTokenizer at the checkpoint's own code"
    if configs["tokenizer_config.json"].get("auto_map"):
        return "tokenizer_config.json's auto_map points at the checkpoint's own code"
    name = configs["tokenizer_config.json"].get("tokenizer_class")
    if name is not None and (not isinstance(name, str) or tokenizer_class_from_name(name) is None):
        return f"tokenizer_config.json names tokenizer_class {name!r}, which transformers does not provide"
    return None


def _json_object(file: Path) -> dict:
    """The file's JSON object; {} when it is absent or not one (transformers then reports what is wrong)."""
    try:
        value = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
