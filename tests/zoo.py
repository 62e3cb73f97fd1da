"""Tiny random checkpoints run through the transformers path: architectures bulkinfer has no native code for, and
DeepSeek-V2/V3, whose native code tests/engine/test_parity_mla.py checks on the same checkpoints.

One declaration per architecture: its config class and the settings that keep the family's distinctive features
switched on at toy size (sliding windows of 8 tokens so 30-token prompts cross them, soft-capping, partial rotary,
multipliers, NoPE layers, KV sharing). `checkpoints.make_checkpoint` builds them like the native ones: the shared
tokenizer and SIZES underneath, these settings on top.
"""

from __future__ import annotations

from typing import Any

from transformers import (
    Cohere2Config,
    DeepseekV2Config,
    DeepseekV3Config,
    Exaone4Config,
    Gemma2Config,
    Gemma3TextConfig,
    Gemma4TextConfig,
    MistralConfig,
    Glm4Config,
    GPTNeoXConfig,
    GraniteConfig,
    Olmo2Config,
    Olmo3Config,
    Phi3Config,
    Qwen3_5TextConfig,
    SeedOssConfig,
    SmolLM3Config,
    StableLmConfig,
)

WINDOW = 8  # tokens; prompts of 30+ tokens slide it several times
ALTERNATING = ["sliding_attention", "full_attention"]
# Gemma scales embeddings by sqrt(hidden_size), so the current token dominates the residual stream; with tied
# embeddings a random model then repeats its last token forever. Untied, greedy output varies.
GEMMA = dict(tie_word_embeddings=False, head_dim=16, sliding_window=WINDOW)


def partial_rope(fraction: float) -> dict[str, Any]:
    """Rotary embedding on only this fraction of each head."""
    return dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": fraction})


# Multi-head latent attention: keys (nope 16 + rope 8) wider than values (12), one head per query head; a dense first
# layer, then routed experts in groups beside a shared expert.
MLA = dict(num_key_value_heads=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
           n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
           first_k_dense_replace=1, n_group=4, topk_group=2)
# DeepSeek-V3's YaRN scaling, whose mscale also scales the softmax.
YARN = dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "original_max_position_embeddings": 64})

# LayerNorm families name the epsilon differently from SIZES' rms_norm_eps.
LAYER_NORM = dict(rms_norm_eps=None, layer_norm_eps=1e-6)

ZOO: dict[str, tuple[type, dict[str, Any]]] = {
    # Attention and final-logit soft-capping, query_pre_attn_scalar (32) != head_dim (16), local/global layers.
    "gemma2": (Gemma2Config, dict(seed=20, query_pre_attn_scalar=32, layer_types=ALTERNATING,
                                  attn_logit_softcapping=20.0, final_logit_softcapping=10.0, **GEMMA)),
    # Gemma 3: q/k norm, a separate RoPE base on local layers, final soft-cap switched on here.
    "gemma3_text": (Gemma3TextConfig, dict(seed=21, query_pre_attn_scalar=32, num_hidden_layers=4,
                                           layer_types=ALTERNATING * 2, final_logit_softcapping=10.0, **GEMMA)),
    # Gemma 4: global layers with a wider head and partial ("proportional") RoPE, per-layer inputs, the last two
    # layers reading the KV of earlier layers of their kind.
    "gemma4_text": (Gemma4TextConfig, dict(seed=22, global_head_dim=32, num_hidden_layers=4,
                                           layer_types=ALTERNATING * 2, num_kv_shared_layers=2,
                                           hidden_size_per_layer_input=8, vocab_size_per_layer_input=704,
                                           final_logit_softcapping=10.0, **GEMMA)),
    # Mistral v0.1: one window on every layer.
    "mistral_window": (MistralConfig, dict(seed=36, sliding_window=WINDOW)),
    # Partial rotary (half the head) and a window on every layer.
    "phi3": (Phi3Config, dict(seed=23, sliding_window=WINDOW, **partial_rope(0.5))),
    # q/k RMSNorm over all heads at once, norms after attention and MLP rather than before.
    "olmo2": (Olmo2Config, dict(seed=24)),
    "olmo3": (Olmo3Config, dict(seed=25, sliding_window=WINDOW, layer_types=ALTERNATING)),
    # Rotary on a quarter of each head, attention and MLP in parallel from one residual, LayerNorm with biases.
    "gpt_neox": (GPTNeoXConfig, dict(seed=26, num_key_value_heads=None, use_parallel_residual=True,
                                     **partial_rope(0.25), **LAYER_NORM)),
    # Every multiplier away from 1: the attention scale replaces 1/sqrt(head_dim).
    "granite": (GraniteConfig, dict(seed=27, embedding_multiplier=3.0, residual_multiplier=0.5,
                                    attention_multiplier=0.1, logits_scaling=2.0)),
    # Partial rotary, q/k/v biases, per-head q/k LayerNorm.
    "stablelm": (StableLmConfig, dict(seed=28, use_qkv_bias=True, qk_layernorm=True, **partial_rope(0.25),
                                      **LAYER_NORM)),
    # Local layers with RoPE, global layers without, parallel attention and MLP, logits scaled.
    "cohere2": (Cohere2Config, dict(seed=29, sliding_window=WINDOW, layer_types=ALTERNATING, logit_scale=0.5,
                                    **LAYER_NORM)),
    # Partial rotary with interleaved pairs, q/k/v biases, norms after attention and MLP.
    "glm4": (Glm4Config, dict(seed=30, head_dim=16, partial_rotary_factor=0.5)),
    # NoPE: the second layer has no rotary embedding.
    "smollm3": (SmolLM3Config, dict(seed=31, no_rope_layers=[1, 0])),
    # Qwen3.5 with every layer full attention (gated attention output, q/k norm, partial rotary).
    "qwen3_5_text": (Qwen3_5TextConfig, dict(seed=32, head_dim=16, layer_types=["full_attention"] * 2)),
    # Qwen3.5 as released: Gated DeltaNet (linear attention) layers beside full ones; refused on this path, which
    # has no recurrent state pool (bulkinfer's own code runs it).
    "qwen3_5_hybrid": (Qwen3_5TextConfig, dict(seed=35, head_dim=16,
                                               layer_types=["linear_attention", "full_attention"],
                                               linear_key_head_dim=16, linear_value_head_dim=16,
                                               linear_num_key_heads=2, linear_num_value_heads=4)),
    # Local layers with RoPE, global ones without, q/k norm, norms after attention and MLP.
    "exaone4": (Exaone4Config, dict(seed=33, sliding_window=WINDOW, layer_types=ALTERNATING)),
    # q/k/v biases without an output bias.
    "seed_oss": (SeedOssConfig, dict(seed=34, head_dim=16, attention_dropout=0.0, residual_dropout=0.0)),
    # DeepSeek-V2: queries straight from q_proj (no q_lora_rank), group-limited greedy routing over softmax scores.
    "deepseek_v2": (DeepseekV2Config, dict(seed=37, q_lora_rank=None, topk_method="group_limited_greedy", **MLA)),
    # DeepSeek-V3: queries through the low-rank q_a/q_b pair, sigmoid routing with the score correction bias.
    "deepseek_v3": (DeepseekV3Config, dict(seed=38, q_lora_rank=24, routed_scaling_factor=2.5, norm_topk_prob=True,
                                           **MLA, **YARN)),
}

# Architectures the engine must refuse before loading weights, and the words its one-line reason contains.
REFUSED = {"qwen3_5_hybrid": "hybrid recurrent"}
