"""Why a checkpoint bulkinfer cannot run is refused, read from config.json alone, before any weight loads.

A user who brings an unsupported model should learn in one line why: an encoder-decoder, no causal LM head,
recurrent state beside the KV cache, or modeling code that only the checkpoint itself carries.
"""

from __future__ import annotations

# Layer kinds that keep a recurrent state instead of (or beside) a KV cache.
_RECURRENT_LAYER_KINDS = ("mamba", "linear_attention", "recurrent", "ssm", "rwkv", "conv")
_RECURRENT_MODEL_TYPES = ("mamba", "mamba2", "rwkv", "jamba", "zamba", "zamba2", "falcon_h1", "bamba",
                          "nemotron_h", "granitemoehybrid", "qwen3_next", "lfm2", "recurrent_gemma", "xlstm")


def refusal_reason(hf: dict) -> str | None:
    """Why a model cannot run on a paged KV cache at all, most fundamental first; None if it may."""
    names = hf.get("architectures") or []
    if hf.get("is_encoder_decoder"):
        return "an encoder-decoder model (bulkinfer runs decoder-only causal LMs)"
    if names and not any(_is_causal_lm(name) for name in names):
        return "no causal LM head"
    if _is_recurrent(hf):
        return "hybrid recurrent layers (Mamba or linear attention) need state beyond a KV cache"
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
