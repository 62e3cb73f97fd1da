"""LFM2's config.json read as transformers reads it: its MLP width rule, its attention layers from layer_types or
the older full_attn_idxs, and its aliases (block_ff_dim, tie_embedding) and defaults."""

from __future__ import annotations

import pytest
import torch
from transformers import Lfm2Config
from transformers.models.lfm2.modeling_lfm2 import Lfm2MLP

from bulkinfer.engine.kv_budget import kv_bytes_per_token
from bulkinfer.engine.state_pool import StatePool
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.llama import CausalLM

# LFM2-350M's config.json as released (the keys that matter): attention layers by index, the MLP by block_ff_dim.
RELEASED_350M = dict(architectures=["Lfm2ForCausalLM"], model_type="lfm2", vocab_size=65536, hidden_size=1024,
                     num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8, norm_eps=1e-5,
                     conv_L_cache=3, conv_bias=False, rope_theta=1000000.0, full_attn_idxs=[2, 5, 8, 10, 12, 14],
                     block_dim=1024, block_ff_dim=6656, block_multiple_of=256, block_ffn_dim_multiplier=1.0,
                     block_auto_adjust_ff_dim=True, tie_embedding=True)
# LFM2.5-style: the width as intermediate_size, no adjusting; layer_types; an untied head.
LATER = dict(RELEASED_350M, block_ff_dim=None, intermediate_size=2560, block_auto_adjust_ff_dim=False,
             full_attn_idxs=None, layer_types=["conv", "full_attention"] * 8, tie_embedding=None,
             tie_word_embeddings=False, rope_theta=None, rope_parameters={"rope_theta": 5e5, "rope_type": "default"})


def _without_none(hf: dict) -> dict:
    return {key: value for key, value in hf.items() if value is not None}


@pytest.mark.parametrize("hf", [
    RELEASED_350M,
    _without_none(LATER),
    dict(RELEASED_350M, block_ffn_dim_multiplier=1.3, block_multiple_of=96),
    _without_none(dict(RELEASED_350M, block_ff_dim=None, intermediate_size=5000, tie_embedding=None,
                       full_attn_idxs=None, rope_theta=None, norm_eps=None)),  # transformers' defaults
], ids=["released", "later", "multiplier", "defaults"])
def test_read_as_transformers_reads_it(hf):
    expected = Lfm2Config(**hf)
    config = ModelConfig.from_hf(hf)
    assert config.intermediate_size == Lfm2MLP(expected).w1.out_features
    attention = {i for i, kind in enumerate(expected.layer_types) if kind == "full_attention"}
    assert set(range(config.num_layers)) - config.hybrid.linear_layers == attention
    assert config.num_attention_layers == len(attention)
    assert config.tie_word_embeddings == expected.tie_word_embeddings
    assert config.rms_norm_eps == expected.norm_eps
    assert config.rope_theta == expected.rope_parameters["rope_theta"]
    assert config.head_dim == expected.hidden_size // expected.num_attention_heads
    assert config.hybrid.mixer.conv_kernel == expected.conv_L_cache


def test_released_350m_widths():
    """The released 350M's MLP is 4,608 wide (6,656 * 2/3, rounded up to 256) and 6 of its 16 layers attend;
    a null multiplier (which transformers 5.24's config no longer accepts, though its MLP does) leaves the two
    thirds unrounded."""
    config = ModelConfig.from_hf(RELEASED_350M)
    assert config.intermediate_size == 4608 and config.num_attention_layers == 6
    assert not config.qwen_hybrid and config.hybrid.mixer.bias is False
    assert ModelConfig.from_hf(dict(RELEASED_350M, block_ffn_dim_multiplier=None)).intermediate_size == 4437


def test_lfm2_1_2b_state_and_kv_bytes():
    """LFM2-1.2B as built here: 1.17 G parameters, as Liquid publishes; in bf16 its 10 convolution layers keep
    81,920 bytes of state per sequence and its 6 attention layers 12,288 bytes of KV per token (docs/models.md)."""
    hf = dict(RELEASED_350M, hidden_size=2048, num_attention_heads=32, block_dim=2048, block_ff_dim=12288,
              torch_dtype="bfloat16")
    with torch.device("meta"):
        model = CausalLM(ModelConfig.from_hf(hf), ops=None, max_position=16).to(torch.bfloat16)
    assert abs(sum(param.numel() for param in model.parameters()) - 1.17e9) < 5e6
    assert StatePool.bytes_per_sequence(model.recurrent_layers()) == 10 * 2048 * 2 * 2
    assert kv_bytes_per_token(model.kv_shapes(), torch.bfloat16) == 6 * 2 * 8 * 64 * 2 == 12_288
