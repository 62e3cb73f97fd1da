"""gpt-oss against transformers on a tiny random checkpoint, in fp32 on the CPU: its attention sinks, sliding
and full layers, YaRN rotary scaling and biased, clamped-SwiGLU experts.

The reference is transformers' eager attention (the sinks written out); each path must give last-position
logits within 1e-4 and greedy tokens that are transformers' own, with chunked prefill, prefix-cache hits
and preemption too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bulkinfer import LLM
from bulkinfer.layers.parallel import TensorParallel
from bulkinfer.layers.quantized_moe import QuantizedExperts
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.footprint import footprint
from bulkinfer.models.loader import _quantized_modules, keeps_mxfp4, read_config
from gpt_oss_checkpoint import gpt_oss_config, write_mxfp4_checkpoint
from probes import last_logits
from test_invariance import random_prompts
from test_parity import hf_model
from test_parity_transformers_path import check_generate_and_logprobs, check_with_chunks_prefix_cache_and_preemption

TRANSFORMERS_PATH = dict(model_impl="transformers", dtype="float32", device="cpu")
NATIVE = dict(model_impl="native", dtype="float32", device="cpu")
PATHS = [pytest.param(NATIVE, id="native"), pytest.param(TRANSFORMERS_PATH, id="transformers")]


@pytest.mark.parametrize("options", PATHS)
def test_logits_and_greedy_match_transformers(tiny_gpt_oss, options):
    hf, llm = hf_model(tiny_gpt_oss), LLM(str(tiny_gpt_oss), block_size=8, max_model_len=256, **options)
    prompts = random_prompts(2, 30, 60, seed=7)  # past the 8-token window
    with torch.no_grad():
        expected = hf(torch.tensor([prompts[0]])).logits[0, -1]
    torch.testing.assert_close(last_logits(llm, prompts[0]), expected, atol=1e-4, rtol=0)
    check_generate_and_logprobs(llm, hf, prompts)


@pytest.mark.parametrize("options", PATHS)
def test_chunks_prefix_cache_and_preemption_keep_parity(tiny_gpt_oss, options):
    check_with_chunks_prefix_cache_and_preemption(tiny_gpt_oss, **options)


def test_mxfp4_experts_stay_mxfp4_and_match_transformers_and_the_dequantized_weights(tiny_gpt_oss, tmp_path):
    """Experts stored as gpt-oss ships them (MXFP4 blocks and scales) stay so in memory, and give the logits and
    greedy tokens of transformers running the weights its own gpt-oss code dequantizes, and ours on those."""
    mxfp4, dequantized = write_mxfp4_checkpoint(tiny_gpt_oss, tmp_path)
    hf, llm = hf_model(dequantized), LLM(str(mxfp4), block_size=8, max_model_len=256, **NATIVE)
    stored = load_file(mxfp4 / "model.safetensors")
    mxfp4_bytes = sum(t.nbytes for name, t in stored.items() if name.endswith(("_blocks", "_scales")))
    experts = [layer.mlp.experts for layer in llm.runner.model.model.layers]
    assert all(isinstance(e, QuantizedExperts) for e in experts)
    assert sum(p.nbytes for e in experts for name, p in e.named_parameters() if "_proj." in name) == mxfp4_bytes
    prompts = random_prompts(2, 20, 40, seed=8)
    with torch.no_grad():
        expected = hf(torch.tensor([prompts[0]])).logits[0, -1]
        plain = hf_model(tiny_gpt_oss)(torch.tensor([prompts[0]])).logits[0, -1]
    assert (expected - plain).abs().max() > 1e-3  # the 4-bit rounding shows: the weights are the quantized ones
    torch.testing.assert_close(last_logits(llm, prompts[0]), expected, atol=1e-4, rtol=0)
    check_generate_and_logprobs(llm, hf, prompts)
    dequantized_llm = LLM(str(dequantized), block_size=8, max_model_len=256, **NATIVE)
    torch.testing.assert_close(last_logits(llm, prompts[1]), last_logits(dequantized_llm, prompts[1]),
                               atol=1e-4, rtol=0)


def test_mxfp4_footprint_is_what_the_model_holds(tiny_gpt_oss, tmp_path):
    """What `inspect --model` reports: the bytes the loaded model's parameters take, the experts in MXFP4."""
    mxfp4, _ = write_mxfp4_checkpoint(tiny_gpt_oss, tmp_path)
    loaded = footprint(mxfp4, read_config(mxfp4)[0])
    model = LLM(str(mxfp4), max_model_len=64, **NATIVE).runner.model
    assert loaded.weight_bytes == sum(p.nbytes for p in model.parameters())
    assert loaded.weight_format == "float32, experts mxfp4 (e2m1, a power-of-two scale per 32)"


def test_mxfp4_experts_are_dequantized_where_ranks_would_split_their_groups(caplog):
    """gpt-oss-20b's 2,880 expert columns: 1,440 a rank over two ranks (45 groups of 32), 720 over four (22.5),
    which the first rank says in one line."""
    config = ModelConfig.from_hf(gpt_oss_config(hidden_size=2880, intermediate_size=2880, num_local_experts=32,
                                                num_attention_heads=64, num_key_value_heads=8, head_dim=64)
                                 .to_dict() | {"architectures": ["GptOssForCausalLM"],
                                               "quantization_config": {"quant_method": "mxfp4"}})
    assert [keeps_mxfp4(config, TensorParallel(0, size)) for size in (1, 2, 4, 8)] == [True, True, False, False]
    assert len(_quantized_modules(Path("unread"), config, TensorParallel(0, 2))) == config.num_layers
    assert _quantized_modules(Path("unread"), config, TensorParallel(0, 4)) == {}
    assert _quantized_modules(Path("unread"), config, TensorParallel(1, 4)) == {}
    assert [r.getMessage() for r in caplog.records if r.name == "bulkinfer.models.loader"] == [
        ("the MXFP4 experts are dequantized at load (3.8 times the memory in bfloat16): 2880 columns of each over "
         "4 ranks are not whole groups of 32")]
