"""A tiny random gpt-oss checkpoint, made with transformers' own GptOssConfig and model classes.

It has what makes gpt-oss gpt-oss, at toy sizes: alternating sliding-window (8 tokens, so test prompts
cross it) and full-attention layers with a learned sink per head, q/k/v/o biases, YaRN rotary scaling,
and a mixture of experts with a biased router, biased experts and the clamped SwiGLU. Every bias and
sink is random (transformers initializes expert biases to zero), so each one shows in the logits.
The tokenizer and chat template are harmony's (tests/harmony_checkpoint.py).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import GenerationConfig, GptOssConfig

from checkpoints import _random_model
from harmony_checkpoint import HARMONY_IDS, VOCAB_SIZE, build_harmony_tokenizer

SLIDING_WINDOW = 8
# gpt-oss's own YaRN parameters, the original context shrunk from 4,096 so test positions pass it.
YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 64}
SIZES = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=512,
             sliding_window=SLIDING_WINDOW, rope_parameters=YARN, initializer_range=0.3, rms_norm_eps=1e-5)


def gpt_oss_config(**overrides) -> GptOssConfig:
    ids = dict(bos_token_id=HARMONY_IDS["<|startoftext|>"], pad_token_id=HARMONY_IDS["<|endoftext|>"],
               eos_token_id=HARMONY_IDS["<|return|>"])
    return GptOssConfig(**{**SIZES, **ids, "vocab_size": VOCAB_SIZE, "tie_word_embeddings": True, **overrides})


def make_gpt_oss_checkpoint(path: str | Path, **overrides) -> Path:
    """The random model and harmony's tokenizer, saved in fp32; it stops where gpt-oss's generation config says."""
    path = Path(path)
    tokenizer = build_harmony_tokenizer()
    config = gpt_oss_config(**overrides)
    model = _random_model(config, len(tokenizer), seed=31, dtype="float32")
    generator = torch.Generator().manual_seed(32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or name.endswith("sinks"):
                param.copy_(torch.randn(param.shape, generator=generator) * config.initializer_range)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, pad_token_id=config.pad_token_id,
        eos_token_id=[HARMONY_IDS["<|return|>"], HARMONY_IDS["<|call|>"], HARMONY_IDS["<|endoftext|>"]])
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
