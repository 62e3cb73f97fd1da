"""gpt-oss against transformers on a tiny random checkpoint, in fp32 on the CPU: its attention sinks, sliding
and full layers, YaRN rotary scaling and biased, clamped-SwiGLU experts.

The reference is transformers' eager attention (the sinks written out); each path must give last-position
logits within 1e-4 and greedy tokens that are transformers' own, with chunked prefill, prefix-cache hits
and preemption too.
"""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM
from bulkinfer.models.footprint import footprint
from bulkinfer.models.loader import read_config
from gpt_oss_checkpoint import write_mxfp4_checkpoint
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


def test_mxfp4_experts_match_transformers_on_the_dequantized_weights(tiny_gpt_oss, tmp_path):
    """Experts stored as gpt-oss ships them (MXFP4 blocks and scales), dequantized at load, against transformers
    running the weights its own gpt-oss code dequantizes."""
    mxfp4, dequantized = write_mxfp4_checkpoint(tiny_gpt_oss, tmp_path)
    hf, llm = hf_model(dequantized), LLM(str(mxfp4), block_size=8, max_model_len=256, **NATIVE)
    assert llm.runner.model.config.mxfp4_experts
    prompts = random_prompts(2, 20, 40, seed=8)
    with torch.no_grad():
        expected = hf(torch.tensor([prompts[0]])).logits[0, -1]
        plain = hf_model(tiny_gpt_oss)(torch.tensor([prompts[0]])).logits[0, -1]
    assert (expected - plain).abs().max() > 1e-3  # the 4-bit rounding shows: the weights are the quantized ones
    torch.testing.assert_close(last_logits(llm, prompts[0]), expected, atol=1e-4, rtol=0)
    check_generate_and_logprobs(llm, hf, prompts)


def test_mxfp4_footprint_counts_the_experts_dequantized(tiny_gpt_oss, tmp_path):
    """What `inspect --model` reports: the MXFP4 checkpoint takes, once loaded, what the dequantized one does."""
    mxfp4, dequantized = write_mxfp4_checkpoint(tiny_gpt_oss, tmp_path)
    loaded = footprint(mxfp4, read_config(mxfp4)[0])
    assert loaded.weight_bytes == footprint(dequantized, read_config(dequantized)[0]).weight_bytes
    assert "MXFP4 experts dequantized at load" in loaded.weight_format
