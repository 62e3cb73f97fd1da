"""The random bench shapes: random:moe-small has the active parameters of random:50m, random:mla-small about
those of random:moe-small."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from bulkinfer.bench.peak import matmul_params
from bulkinfer.bench.random_model import SHAPES, hf_config
from bulkinfer.layers.moe import Routing
from bulkinfer.models.config import ModelConfig


def _config(shape: str) -> ModelConfig:
    return ModelConfig.from_hf(hf_config(SHAPES[shape]).to_dict())


def test_moe_small_is_qwen3_moe_with_the_active_parameters_of_50m():
    moe, dense = _config("moe-small"), _config("50m")
    assert moe.architecture == "Qwen3MoeForCausalLM" and dense.architecture == "LlamaForCausalLM"
    assert (moe.moe.num_experts, moe.moe.routing) == (8, Routing(2, True))
    assert moe.moe.sparse_layers == frozenset(range(moe.num_layers)) and moe.head_dim == dense.head_dim
    routers = moe.num_layers * moe.hidden_size * moe.moe.num_experts
    assert matmul_params(moe) == matmul_params(dense) + routers
    # A decode step of a large batch reads every expert: four times the MLP weights.
    mlp = 3 * dense.hidden_size * dense.intermediate_size * dense.num_layers
    assert matmul_params(moe, active=False) == matmul_params(dense) + routers + 3 * mlp


def _active_parameters(shape: str) -> int:
    """Parameters a token runs through: all of them but the experts it was not routed to (a meta model)."""
    config = hf_config(SHAPES[shape])
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    experts = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    idle = 1 - SHAPES[shape].num_experts_per_tok / SHAPES[shape].num_experts if SHAPES[shape].num_experts else 0
    return sum(p.numel() for p in model.parameters()) - int(experts * idle)


def test_mla_small_is_deepseek_v2_with_about_the_active_parameters_of_moe_small():
    config = hf_config(SHAPES["mla-small"]).to_dict()
    assert config["architectures"] == ["DeepseekV2ForCausalLM"] and config["kv_lora_rank"] == 128
    assert config["qk_nope_head_dim"] + config["qk_rope_head_dim"] != config["v_head_dim"]  # latent attention
    assert _active_parameters("mla-small") == pytest.approx(_active_parameters("moe-small"), rel=0.02)


def test_mla_50m_is_a_dense_deepseek_v2_with_about_the_parameters_of_50m():
    config = hf_config(SHAPES["mla-50m"]).to_dict()
    assert config["architectures"] == ["DeepseekV2ForCausalLM"] and config["kv_lora_rank"] == 128
    assert config["first_k_dense_replace"] == config["num_hidden_layers"]  # no routed experts
    assert _active_parameters("mla-50m") == pytest.approx(_active_parameters("50m"), rel=0.02)
    # Every parameter is a matmul weight but the embedding and the norms (two per layer, the latent's, the last).
    mla = _config("mla-50m")
    norms = mla.num_layers * (2 * mla.hidden_size + mla.mla.kv_lora_rank) + mla.hidden_size
    assert matmul_params(mla) == _active_parameters("mla-50m") - mla.vocab_size * mla.hidden_size - norms
