"""Native multi-head latent attention (DeepSeek-V2 without q_lora_rank, V3 with it and YaRN) against transformers
on the zoo's tiny checkpoints, in fp32 on the CPU: logits, greedy tokens and prompt logprobs, batched, with
chunked prefill, prefix-cache hits and preemption; and the absorbed decode against the expanded form."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from bulkinfer import LLM
from bulkinfer.kernels.paged_attention import gather_rows
from bulkinfer.layers.mla import MLAttention
from bulkinfer.models.config import ModelConfig, UnsupportedModelError
from test_parity import PROMPT_LENGTHS, check_against_transformers
from test_parity_transformers_path import check_with_chunks_prefix_cache_and_preemption

# Every layer a dense MLP (no router runs). Zoo entries with their overrides: a DeepSeek mixture of experts joins
# this list as ("deepseek_v3", {}) once DeepSeek's routing runs natively.
DENSE = dict(first_k_dense_replace=2)
MLA_MODELS = [pytest.param("deepseek_v2", DENSE, id="deepseek_v2-dense"),
              pytest.param("deepseek_v3", DENSE, id="deepseek_v3-dense"),
              # With routed experts: V2's group-limited greedy routing, V3's sigmoid scores and correction bias.
              pytest.param("deepseek_v2", {}, id="deepseek_v2-moe"),
              pytest.param("deepseek_v3", {}, id="deepseek_v3-moe")]
# DeepSeek-V3's checkpoints with rotary pairs in halves rather than side by side.
HALVES = pytest.param("deepseek_v3", DENSE | dict(rope_interleave=False), id="deepseek_v3-halves")
NATIVE = dict(model_impl="native", dtype="float32", device="cpu")


@pytest.mark.parametrize(("arch", "overrides"), [*MLA_MODELS, HALVES])
def test_logits_and_greedy_match_transformers(checkpoint_factory, arch, overrides):
    llm = check_against_transformers(checkpoint_factory(arch, **overrides), block_size=8,
                                     num_prompts=len(PROMPT_LENGTHS), max_tokens=8, **NATIVE)
    assert all(isinstance(layer, MLAttention) for layer in llm.runner.model.attention_layers())


@pytest.mark.parametrize(("arch", "overrides"), MLA_MODELS)
def test_chunks_prefix_cache_and_preemption_keep_parity(checkpoint_factory, arch, overrides):
    check_with_chunks_prefix_cache_and_preemption(checkpoint_factory(arch, **overrides), **NATIVE)


def test_the_cache_holds_one_latent_row_per_token_and_layer(checkpoint_factory):
    """2 layers x (latent 32 + rotary key 8) fp32 values: where the expanded keys and values of 4 heads would
    take 2 x 4 x 24 per layer (the transformers path's 1,536 bytes)."""
    llm = LLM(str(checkpoint_factory("deepseek_v3", **DENSE)), num_kv_blocks=8, **NATIVE)
    assert llm.runner.kv_bytes_per_token == 2 * (32 + 8) * 4
    assert [tuple(cache.shape) for cache in llm.runner.kv_caches] == [(1, 8, 16, 1, 40)] * 2


def test_multi_token_prediction_layers_past_the_decoder_are_skipped(checkpoint_factory, tmp_path):
    """DeepSeek-V3's released weights add a prediction layer after the last decoder layer; it loads as if absent."""
    from safetensors.torch import save_file

    path = tmp_path / "with_mtp"
    shutil.copytree(checkpoint_factory("deepseek_v3", **DENSE), path)
    hidden = json.loads((path / "config.json").read_text())["hidden_size"]
    save_file({"model.layers.2.eh_proj.weight": torch.ones(hidden, 2 * hidden),
               "model.layers.2.self_attn.kv_a_layernorm.weight": torch.ones(32)}, str(path / "mtp.safetensors"))
    with_mtp = LLM(str(path), **NATIVE).generate(["a b c"], use_tqdm=False)[0].outputs[0].token_ids
    plain = LLM(str(checkpoint_factory("deepseek_v3", **DENSE)), **NATIVE).generate(["a b c"], use_tqdm=False)
    assert with_mtp == plain[0].outputs[0].token_ids


def test_absorbed_decode_equals_attention_over_expanded_keys_and_values(checkpoint_factory):
    """A layer of the loaded model: decode in the latent space (queries through kv_b's key block, the output
    through its value block) gives what expanding every cached row into keys and values gives."""
    llm = LLM(str(checkpoint_factory("deepseek_v3", **DENSE)), num_kv_blocks=16, block_size=4, **NATIVE)
    layer = llm.runner.model.attention_layers()[1]
    gen = torch.Generator().manual_seed(0)
    lengths = [1, 5, 13]
    tables = torch.randperm(16, generator=gen)[:12].view(3, 4).to(torch.int32)  # shuffled blocks
    layer.k_cache.copy_(torch.randn(layer.k_cache.shape, generator=gen))
    q_nope, q_rope = torch.randn(3, 4, 16, generator=gen), torch.randn(3, 4, 8, generator=gen)
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    absorbed = layer._decode(q_nope, q_rope, seq_lens, tables, max(lengths))
    for i, length in enumerate(lengths):
        context = gather_rows(layer.k_cache, tables[i], length, 1.0, torch.float32)
        expanded = layer._extend(q_nope[i:i + 1], q_rope[i:i + 1], context)
        torch.testing.assert_close(absorbed[i:i + 1], expanded, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("option", "message"), [(dict(kv_cache_dtype="fp8_e4m3"), "kv_cache_dtype='fp8_e4m3'"),
                                                 (dict(deterministic=True), "deterministic=True"),
                                                 (dict(enable_lora=True), "LoRA adapters")])
def test_options_latent_attention_does_not_run_with_are_refused_in_one_line(checkpoint_factory, option, message):
    with pytest.raises(ValueError, match=rf"{re.escape(message)}.* does not run with multi-head latent attention "
                                         r"\(DeepseekV3ForCausalLM\)$"):
        LLM(str(checkpoint_factory("deepseek_v3", **DENSE)), **option)


def test_quantized_latent_attention_is_refused_in_one_line(checkpoint_factory):
    hf = json.loads((checkpoint_factory("deepseek_v3", **DENSE) / "config.json").read_text())
    hf["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    with pytest.raises(UnsupportedModelError, match="quantized DeepseekV3ForCausalLM"):
        ModelConfig.from_hf(hf)
