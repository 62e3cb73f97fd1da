"""Liquid's LFM2 in the shared decoder's terms (models/llama.py runs it): its config.json keys and its tensor names.

LFM2 is the Llama-family decoder with short-convolution layers (layers/short_conv.py) in place of most attention
layers, q/k norms, and names of its own for nearly every part; translating them here keeps the decoder and the
loader free of LFM2's spelling.
"""

from __future__ import annotations

import re

# LFM2's tensor names -> the shared decoder's (before the loader fuses q/k/v and gate/up). A convolution layer is
# the decoder layer's recurrent mixer (``linear_attn``, as Qwen names its delta-net). An LFM2-MoE expert's
# w1/w3/w2 then take Mixtral's expert renames; its router's per-expert bias is DeepSeek-V3's
# score correction bias, which only chooses.
LFM2_RENAMES = [(re.compile(r"\.operator_norm\."), ".input_layernorm."),
                (re.compile(r"\.ffn_norm\."), ".post_attention_layernorm."),
                (re.compile(r"\.feed_forward\."), ".mlp."),
                (re.compile(r"\.mlp\.w1\."), ".mlp.gate_proj."),
                (re.compile(r"\.mlp\.w3\."), ".mlp.up_proj."),
                (re.compile(r"\.mlp\.w2\."), ".mlp.down_proj."),
                (re.compile(r"\.mlp\.expert_bias$"), ".mlp.gate.e_score_correction_bias"),
                (re.compile(r"\.self_attn\.out_proj\."), ".self_attn.o_proj."),
                (re.compile(r"\.self_attn\.([qk])_layernorm\."), r".self_attn.\1_norm."),
                (re.compile(r"(\.layers\.\d+)\.conv\."), r"\1.linear_attn."),
                (re.compile(r"^model\.embedding_norm\."), "model.norm.")]


def lfm2_keys(hf: dict, moe: bool = False) -> dict:
    """LFM2's config.json with the keys the shared decoder reads: its MLP's real width (LFM2-MoE's dense layers
    take intermediate_size as it is), its norm epsilon, which layers are attention (``layer_types``, or
    ``full_attn_idxs`` in older files), and transformers' LFM2 defaults (tied embeddings, rope theta 1e6) where
    the file leaves them out."""
    attention = hf.get("full_attn_idxs")
    kinds = hf.get("layer_types") or ["full_attention" if attention is None or layer in attention else "conv"
                                      for layer in range(hf["num_hidden_layers"])]
    rope = hf.get("rope_parameters") or {}
    width = hf.get("intermediate_size", 7168) if moe else lfm2_mlp_width(hf)
    return {**hf, "intermediate_size": width, "rms_norm_eps": hf.get("norm_eps", 1e-5),
            "layer_types": kinds, "tie_word_embeddings": hf.get("tie_embedding", hf.get("tie_word_embeddings", True)),
            "rope_theta": hf.get("rope_theta") or rope.get("rope_theta", 1e6),
            "max_position_embeddings": hf.get("max_position_embeddings", 128_000)}


def lfm2_mlp_width(hf: dict) -> int:
    """The MLP's hidden width as transformers' Lfm2MLP computes it: ``block_ff_dim`` (or intermediate_size),
    auto-adjusted to two thirds, times ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``."""
    width = hf.get("block_ff_dim", hf.get("intermediate_size", 12288))
    if not hf.get("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    multiplier = hf.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is None:
        return width
    multiple = hf.get("block_multiple_of", 256)
    return multiple * ((int(multiplier * width) + multiple - 1) // multiple)
