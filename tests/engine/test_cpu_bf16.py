"""The CPU path in bfloat16: linear weights packed once in oneDNN's layout, and results within bf16's
rounding of transformers' own bf16 forward pass."""

from __future__ import annotations

import pytest
import torch
from probes import last_logits
from torch import nn
from transformers import AutoModelForCausalLM

from bulkinfer import LLM
from bulkinfer.layers import linear
from bulkinfer.layers.linear import Linear, pack_linear_weights

pytestmark = pytest.mark.skipif(not linear._ONEDNN, reason="oneDNN is not available")


def _layers(dtype: torch.dtype) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Linear(64, 96, bias=True), Linear(96, 40)).to(dtype)


@pytest.mark.parametrize("rows", [1, 5, 64, 300])
def test_packed_weights_give_the_plain_weights_result(rows):
    model = _layers(torch.bfloat16)
    x = torch.randn(rows, 64).bfloat16()
    plain = model(x)
    assert pack_linear_weights(model) == 2
    assert all(layer.weight.layout == torch._mkldnn for layer in model)
    torch.testing.assert_close(model(x), plain, atol=1e-2, rtol=1e-2)


def test_fp32_and_shared_weights_stay_plain():
    fp32 = _layers(torch.float32)
    tied = _layers(torch.bfloat16)
    tied[1].weight = nn.Parameter(torch.randn(40, 96).bfloat16())
    embedding = nn.Embedding(40, 96).bfloat16()
    embedding.weight = tied[1].weight  # an LM head tied to its embedding, which looks rows up
    assert pack_linear_weights(fp32) == 0
    assert pack_linear_weights(nn.ModuleList([tied, embedding])) == 1
    assert tied[1].weight.layout == torch.strided and tied[0].weight.layout == torch._mkldnn


def test_bf16_engine_packs_its_weights_and_matches_transformers_bf16(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="bfloat16", device="cpu", max_model_len=128)
    attention = llm.runner.model.model.layers[0].self_attn
    assert attention.qkv_proj.weight.layout == torch._mkldnn
    assert_as_close_to_fp32_as_transformers_bf16(llm, tiny_llama)


@pytest.mark.parametrize("arch", ["deepseek_v3", "granite_h", "lfm2"])
def test_bf16_engines_of_other_layer_kinds_match_transformers_bf16(checkpoint_factory, arch):
    """Latent attention (whose kv_b_proj stays plain: the absorbed decode reads it), Mamba2 and short convolutions
    over packed weights."""
    path = checkpoint_factory(arch)
    assert_as_close_to_fp32_as_transformers_bf16(LLM(str(path), dtype="bfloat16", device="cpu", max_model_len=128),
                                                 path)


def assert_as_close_to_fp32_as_transformers_bf16(llm: LLM, path) -> None:
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager").eval()
    exact = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    generator = torch.Generator().manual_seed(0)
    ours_errors, their_errors = [], []
    for length in (1, 9, 64):
        ids = torch.randint(5, llm.tokenizer.vocab_size, (length,), generator=generator).tolist()
        with torch.no_grad():
            theirs = hf(torch.tensor([ids])).logits[0, -1].float()
            truth = exact(torch.tensor([ids])).logits[0, -1]
        ours_errors.append(float((last_logits(llm, ids) - truth).abs().max()))
        their_errors.append(float((theirs - truth).abs().max()))
    # Two bf16 computations round in different places, so on one prompt either may be the closer (on a tiny random
    # Granite 4.0-H, 2.4x apart either way): over the prompts, ours is as far from fp32 as theirs, give or take.
    assert max(ours_errors) <= 2 * max(their_errors) + 1e-2, (ours_errors, their_errors)


def test_packed_experts_replace_their_stacks_and_give_their_result():
    from bulkinfer.layers.moe import FusedExperts
    from bulkinfer.layers.moe_cpu import pack_expert_weights
    from bulkinfer.layers.ops import CPU_OPS
    from bulkinfer.layers.parallel import SINGLE

    torch.manual_seed(0)
    experts = FusedExperts(4, 64, 48, CPU_OPS, SINGLE).bfloat16()
    for stack in (experts.gate_up_proj, experts.down_proj):
        torch.nn.init.normal_(stack, std=0.1)
    x = torch.randn(7, 64).bfloat16()
    weights, ids = torch.rand(7, 2), torch.randint(0, 4, (7, 2))
    plain = experts(x, weights, ids)
    assert pack_expert_weights(experts) == 2
    assert [name for name, _ in experts.named_parameters()][:2] == ["gate_up_proj.0", "gate_up_proj.1"]
    assert all(param.layout == torch._mkldnn for param in experts.parameters())
    torch.testing.assert_close(experts(x, weights, ids), plain, atol=1e-2, rtol=1e-2)
    experts.batch_invariant = True  # the deterministic path multiplies the same packed experts
    torch.testing.assert_close(experts(x, weights, ids), plain, atol=1e-2, rtol=1e-2)


def test_bf16_mixture_of_experts_engine_matches_transformers_bf16(checkpoint_factory):
    path = checkpoint_factory("qwen3_moe")
    llm = LLM(str(path), dtype="bfloat16", device="cpu", max_model_len=128)
    assert isinstance(llm.runner.model.model.layers[0].mlp.experts.gate_up_proj, nn.ParameterList)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager").eval()
    exact = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.randint(5, llm.tokenizer.vocab_size, (20,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0, -1].float()
        truth = exact(torch.tensor([ids])).logits[0, -1]
    assert (last_logits(llm, ids) - truth).abs().max() <= 2 * (theirs - truth).abs().max() + 1e-2
