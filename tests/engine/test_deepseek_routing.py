"""DeepSeek-V2/V3's mixture of experts: our MoE block against transformers' own DeepseekV2Moe and DeepseekV3MoE.

Each case saves a tiny random DeepSeek model with transformers, loads its sparse layer's tensors by their
checkpoint names through our loader into our block, and compares the two blocks' outputs in fp32. Also: which
layers are sparse, and the one-line refusal of a routing we do not have.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

from bulkinfer.layers.moe import Routing, SparseMoeBlock, route
from bulkinfer.layers.ops import CPU_OPS
from bulkinfer.layers.parallel import SINGLE
from bulkinfer.models.config import MoEConfig
from bulkinfer.models.loader import load_tensors
from bulkinfer.models.refusal import UnsupportedModelError

HIDDEN = 32
SIZES = dict(vocab_size=64, hidden_size=HIDDEN, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=2, n_routed_experts=8, num_experts_per_tok=3,
             first_k_dense_replace=1, kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
             v_head_dim=8, initializer_range=0.3)
FAMILIES = {"deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM),
            "deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM)}
CASES = [
    pytest.param("deepseek_v2", dict(topk_method="greedy", n_shared_experts=2), id="v2-greedy"),
    pytest.param("deepseek_v2", dict(topk_method="group_limited_greedy", n_group=4, topk_group=2,
                                     routed_scaling_factor=16.0, n_shared_experts=1), id="v2-group-limited"),
    pytest.param("deepseek_v3", dict(n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                                     n_shared_experts=1), id="v3-groups-normalized"),
    pytest.param("deepseek_v3", dict(n_group=2, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.0,
                                     n_shared_experts=2), id="v3-groups-unnormalized"),
    pytest.param("deepseek_v3", dict(n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.827,
                                     n_shared_experts=1), id="v3-one-group"),  # Kimi K2's routing
]


def _save_transformers_model(path, family: str, overrides: dict) -> nn.Module:
    """A random DeepSeek model saved by transformers, V3's correction bias random too (it starts at zero)."""
    config_class, model_class = FAMILIES[family]
    torch.manual_seed(0)
    model = model_class(config_class(**SIZES, **overrides)).eval()
    for name, buffer in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            buffer.copy_(torch.randn(buffer.shape) * 0.2)
    model.save_pretrained(path)
    return model


class _SparseLayer(nn.Module):
    """Our block where the checkpoint's layer 1 keeps its MLP, as the loader names a model's tensors."""

    def __init__(self, block: SparseMoeBlock):
        super().__init__()
        layer = nn.Module()
        layer.mlp = block
        self.model = nn.Module()
        self.model.layers = nn.ModuleList([nn.Module(), layer])
        self.config = SimpleNamespace(head="lm", tie_word_embeddings=False, architecture="DeepSeek")
        self.tp = SINGLE


def _our_block(path, family: str) -> SparseMoeBlock:
    moe = MoEConfig.from_hf(family, json.loads((path / "config.json").read_text()))
    assert moe.sparse_layers == {1}
    block = SparseMoeBlock(HIDDEN, moe.num_experts, moe.intermediate_size, moe.routing, CPU_OPS, SINGLE,
                           moe.shared_intermediate_size, moe.shared_gated)
    tensors = load_file(path / "model.safetensors")
    load_tensors(_SparseLayer(block), ((n, t) for n, t in tensors.items() if n.startswith("model.layers.1.mlp.")))
    return block.eval()


@pytest.mark.parametrize("family, overrides", CASES)
def test_moe_block_matches_transformers(tmp_path, family, overrides):
    hf_block = _save_transformers_model(tmp_path, family, overrides).model.layers[1].mlp
    block = _our_block(tmp_path, family)
    x = torch.randn(40, HIDDEN, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_block(x[None])[0]
        torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-5)
        # The case's routing chooses other experts than a plain top-k of the scores: the options are exercised.
        routing = block.gate.routing
        if routing.method != "greedy":
            plain = Routing(routing.top_k, routing.normalize, routing.scoring)
            chosen, plainly = block.gate.choose(x)[1], route(block.gate(x), plain)[1]
            assert not torch.equal(chosen.sort(-1).values, plainly.sort(-1).values)


def _deepseek_config(**keys) -> dict:
    return {"num_hidden_layers": 6, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
            **keys}


@pytest.mark.parametrize("keys, sparse", [
    (dict(first_k_dense_replace=2), {2, 3, 4, 5}),
    (dict(first_k_dense_replace=1, moe_layer_freq=2), {2, 4}),
    (dict(), {3, 4, 5}),  # V3's default: three dense layers first
])
def test_sparse_layers_follow_first_k_dense_replace_and_moe_layer_freq(keys, sparse):
    assert MoEConfig.from_hf("deepseek_v3", _deepseek_config(**keys)).sparse_layers == sparse


def test_v3_defaults_are_transformers_and_the_released_checkpoints():
    moe = MoEConfig.from_hf("deepseek_v3", _deepseek_config(n_group=4, topk_group=2))
    assert moe.routing == Routing(2, True, "sigmoid", "noaux_tc", 4, 2, 2.5)
    assert (moe.shared_intermediate_size, moe.shared_gated) == (16, False)


@pytest.mark.parametrize("key, value", [("topk_method", "aux_loss_free"), ("scoring_func", "sqrtsoftplus")])
def test_unknown_routing_is_refused_in_one_line(key, value):
    with pytest.raises(UnsupportedModelError, match=f"deepseek_v2 with {key} '{value}'") as refusal:
        MoEConfig.from_hf("deepseek_v2", _deepseek_config(**{key: value}))
    assert "\n" not in str(refusal.value)


@pytest.mark.parametrize("num_experts", [12, 60])
def test_sigmoid_routing_of_a_row_does_not_depend_on_the_batch(num_experts):
    """Deterministic mode's promise: V3's scores, weights and choices for a token are bit for bit the same
    whichever tokens share its step."""
    routing = Routing(3, True, "sigmoid", "noaux_tc", num_groups=4, top_groups=2, scaling=2.5)
    gen = torch.Generator().manual_seed(4)
    logits, bias = torch.randn(37, num_experts, generator=gen), torch.randn(num_experts, generator=gen) * 0.1
    weights, ids = route(logits, routing, bias)
    for row in range(37):
        alone = route(logits[row:row + 1], routing, bias)
        assert torch.equal(alone[0][0], weights[row]) and torch.equal(alone[1][0], ids[row])
