"""The random bench shapes: random:moe-small has the active parameters of random:50m."""

from __future__ import annotations

from bulkinfer.bench.peak import matmul_params
from bulkinfer.bench.random_model import SHAPES, hf_config
from bulkinfer.models.config import ModelConfig


def _config(shape: str) -> ModelConfig:
    return ModelConfig.from_hf(hf_config(SHAPES[shape]).to_dict())


def test_moe_small_is_qwen3_moe_with_the_active_parameters_of_50m():
    moe, dense = _config("moe-small"), _config("50m")
    assert moe.architecture == "Qwen3MoeForCausalLM" and dense.architecture == "LlamaForCausalLM"
    assert (moe.moe.num_experts, moe.moe.top_k, moe.moe.normalize) == (8, 2, True)
    assert moe.moe.sparse_layers == frozenset(range(moe.num_layers)) and moe.head_dim == dense.head_dim
    routers = moe.num_layers * moe.hidden_size * moe.moe.num_experts
    assert matmul_params(moe) == matmul_params(dense) + routers
    # A decode step of a large batch reads every expert: four times the MLP weights.
    mlp = 3 * dense.hidden_size * dense.intermediate_size * dense.num_layers
    assert matmul_params(moe, active=False) == matmul_params(dense) + routers + 3 * mlp
