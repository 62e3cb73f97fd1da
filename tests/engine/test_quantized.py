"""Quantized checkpoints against the same model with dequantized weights, read by a loader bulkinfer did not
write: transformers with compressed-tensors' decompression, transformers' fp8 dequantization, or (for GPTQ
and AWQ, whose readers do not run here) a plain checkpoint of the weights the writer dequantized.

Tolerance: the CPU path multiplies by the dequantized weight, so logits agree with the reference to float
rounding (1e-4 in fp32) for every format; quantization itself moves them by far more (checked, so the
comparison would see a format read wrongly)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.utils.quantization_config import CompressedTensorsConfig

from bulkinfer import LLM, SamplingParams
from bulkinfer.layers.quantized_linear import QuantizedLinear
from bulkinfer.kernels.fused_moe import fused_moe_triton
from bulkinfer.layers.quantized_moe import QuantizedExperts
from probes import last_logits
from quantized_checkpoints import (
    awq_config, awq_quantizer, fp8_block_config, fp8_block_quantizer, gptq_config, gptq_quantizer,
    write_by_layout, write_compressed_tensors,
)
from test_invariance import random_prompts, token_ids
from test_parity import assert_greedy_matches, hf_model, prompts

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
CT_WEIGHTS = {
    "ct-w4a16-sym-g32": (dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32),
                         "pack-quantized", None),
    "ct-w4a16-asym-g64": (dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=64),
                          "pack-quantized", None),
    "ct-w8a16-channel": (dict(num_bits=8, type="int", symmetric=True, strategy="channel"), "pack-quantized", None),
    "ct-w8-naive-g32": (dict(num_bits=8, type="int", symmetric=True, strategy="group", group_size=32),
                        "naive-quantized", None),
    "ct-fp8-channel": (dict(num_bits=8, type="float", symmetric=True, strategy="channel"), "float-quantized",
                       dict(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True)),
    "ct-fp8-tensor": (dict(num_bits=8, type="float", symmetric=True, strategy="tensor"), "float-quantized", None),
    "ct-fp8-block-32": (dict(num_bits=8, type="float", symmetric=True, strategy="block", block_structure=[32, 32]),
                        "float-quantized", dict(num_bits=8, type="float", symmetric=True, strategy="group",
                                                group_size=32, dynamic=True)),
}
BY_LAYOUT = {
    "fp8-block-32": (fp8_block_config((32, 32)), fp8_block_quantizer((32, 32))),
    "fp8-block-16": (fp8_block_config((16, 16)), fp8_block_quantizer((16, 16))),  # Mixtral's experts: 48 wide
    "gptq-4bit-g32": (gptq_config(4, 32, False, True), gptq_quantizer(4, 32, False, True)),
    "gptq-4bit-g32-asym": (gptq_config(4, 32, False, False), gptq_quantizer(4, 32, False, False)),
    "gptq-4bit-g16-asym": (gptq_config(4, 16, False, False), gptq_quantizer(4, 16, False, False)),
    "gptq-4bit-g32-desc-act-asym": (gptq_config(4, 32, True, False), gptq_quantizer(4, 32, True, False)),
    "gptq-8bit-g64-desc-act": (gptq_config(8, 64, True, True), gptq_quantizer(8, 64, True, True)),
    "awq-g32": (awq_config(32), awq_quantizer(32)),
}
FORMATS = [*CT_WEIGHTS, *BY_LAYOUT]


def quantized_and_reference(tmp_path_factory, checkpoint_factory, name: str, arch: str = "qwen2"):
    """(the quantized checkpoint, its dequantized reference model from a loader bulkinfer did not write).
    Qwen2 by default: its q/k/v biases stay plain beside quantized weights."""
    src = checkpoint_factory(arch)
    out = tmp_path_factory.mktemp("quantized") / name
    if name in CT_WEIGHTS:
        weights, compression_format, inputs = CT_WEIGHTS[name]
        path = write_compressed_tensors(src, out, weights, compression_format, inputs)
        reference = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, quantization_config=CompressedTensorsConfig(dequantize=True))
        return path, reference.eval()
    config, quantizer = BY_LAYOUT[name]
    path, dequantized = write_by_layout(src, out, config, quantizer)
    # fp8: transformers' own dequantization (it runs on the CPU); the integers: the writer's weights.
    return path, hf_model(path if config["quant_method"] == "fp8" else dequantized)


@pytest.fixture(scope="module", params=FORMATS)
def quantized(request, tmp_path_factory, checkpoint_factory):
    return quantized_and_reference(tmp_path_factory, checkpoint_factory, request.param)


def test_logits_and_greedy_match_the_dequantized_model(quantized, checkpoint_factory):
    path, reference = quantized
    llm = LLM(str(path), dtype="float32", block_size=8, max_model_len=128)
    layers = [m for m in llm.runner.model.modules() if isinstance(m, QuantizedLinear)]
    assert len(layers) == 2 * 4  # qkv, o, gate_up, down of each of the 2 layers; lm_head stays plain
    # Held quantized: at most 10 bits a weight (int8 with fp32 scales for groups of 32) where plain holds 32.
    held = sum(p.numel() * p.element_size() for layer in layers for p in layer.parameters())
    assert held < 10 / 32 * sum(4 * m.in_features * m.out_features for m in layers)
    plain = hf_model(checkpoint_factory("qwen2"))
    prompt_ids = prompts(llm.tokenizer.vocab_size)[:4]
    for ids in prompt_ids:
        with torch.no_grad():
            expected, unquantized = reference(torch.tensor([ids])).logits[0, -1], plain(torch.tensor([ids])).logits[0, -1]
        got = last_logits(llm, ids)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        assert (got - unquantized).abs().max() > 1e-3  # the weights really are the quantized ones
    outputs = llm.generate(prompt_ids, GREEDY, use_tqdm=False)
    assert_greedy_matches(reference, prompt_ids, outputs)


@pytest.mark.parametrize("arch, name", [("qwen3_moe", "gptq-4bit-g32-asym"), ("qwen3_moe", "fp8-block-32"),
                                        ("mixtral", "gptq-4bit-g16-asym"), ("mixtral", "fp8-block-16")])
def test_quantized_experts_match_the_dequantized_model(tmp_path_factory, checkpoint_factory, arch, name):
    """Every expert's projections quantized (the router stays plain), Mixtral's expert names too."""
    path, reference = quantized_and_reference(tmp_path_factory, checkpoint_factory, name, arch)
    llm = LLM(str(path), dtype="float32", block_size=8, max_model_len=128)
    assert all(isinstance(layer.mlp.experts, QuantizedExperts) for layer in llm.runner.model.model.layers)
    prompt_ids = prompts(llm.tokenizer.vocab_size)[:3]
    for ids in prompt_ids:
        with torch.no_grad():
            expected = reference(torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(last_logits(llm, ids), expected, atol=1e-4, rtol=0)
    assert_greedy_matches(reference, prompt_ids, llm.generate(prompt_ids, GREEDY, use_tqdm=False))


@pytest.mark.parametrize("name", ["gptq-4bit-g32-asym", "fp8-block-32"])
def test_the_fused_moe_kernel_reads_the_loaded_experts(tmp_path_factory, checkpoint_factory, name):
    """The GPU's path for quantized experts (the Triton kernel, in the interpreter here) on the stacks the
    loader filled: the CPU path's result."""
    path, _ = quantized_and_reference(tmp_path_factory, checkpoint_factory, name, "qwen3_moe")
    llm = LLM(str(path), dtype="float32", block_size=8, max_model_len=128)
    experts = llm.runner.model.model.layers[0].mlp.experts
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, llm.model_config.hidden_size, generator=generator)
    ids = torch.randint(0, experts.num_experts, (5, 2), generator=generator)
    weights = torch.rand(5, 2, generator=generator)
    with torch.no_grad():
        expected = experts(x, weights, ids)
        got = fused_moe_triton(x, *experts.expert_weights(), weights, ids)
    torch.testing.assert_close(got, expected, atol=1e-4 * expected.abs().max().item(), rtol=1e-3)


@pytest.mark.parametrize("name", ["ct-w4a16-asym-g64", "gptq-4bit-g32-desc-act-asym", "fp8-block-32"])
def test_greedy_matches_with_chunks_prefix_cache_and_preemption(tmp_path_factory, checkpoint_factory, name):
    """Shared prefixes, 7-token steps and too few blocks for all requests at once."""
    path, reference = quantized_and_reference(tmp_path_factory, checkpoint_factory, name)
    llm = LLM(str(path), dtype="float32", block_size=4, max_model_len=128, max_num_batched_tokens=7, num_kv_blocks=20,
              enable_prefix_caching=True)
    shared = random_prompts(1, 20, 21, seed=2)[0]
    prompt_ids = [shared + tail for tail in random_prompts(8, 5, 40, seed=3)]
    outputs = llm.generate(prompt_ids, GREEDY, use_tqdm=False)
    assert llm.stats.preemptions > 0 and llm.stats.prefix_cache_hit_tokens > 0
    assert_greedy_matches(reference, prompt_ids, outputs)
    assert all(len(tokens) == GREEDY.max_tokens for tokens in token_ids(outputs))


@pytest.mark.parametrize("name, arch", [("gptq-4bit-g32-desc-act-asym", "llama"), ("fp8-block-32", "qwen3_moe")])
def test_deterministic_mode_keeps_quantized_results_batch_invariant(tmp_path_factory, checkpoint_factory, name, arch):
    """Each request's tokens and logprobs are bitwise the same alone and in a batch with others."""
    path, _ = quantized_and_reference(tmp_path_factory, checkpoint_factory, name, arch)
    llm = LLM(str(path), dtype="float32", max_model_len=128, block_size=8, deterministic=True,
              enable_prefix_caching=False)
    batch = random_prompts(4, 3, 60, seed=7)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=2)

    def result(output):
        return output.outputs[0].token_ids, [[(t, r.logprob) for t, r in rec.items()] for rec in output.outputs[0].logprobs]

    together = [result(o) for o in llm.generate(batch, params, use_tqdm=False)]
    assert together == [result(llm.generate([prompt], params, use_tqdm=False)[0]) for prompt in batch]
