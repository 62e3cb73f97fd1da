"""Fused MoE over quantized experts (FP8, INT4/INT8, MXFP4): the Triton kernel against fused_moe_ref
over the same experts dequantized, and each format's stacked experts against its own 2-D dequantization."""

from __future__ import annotations

import pytest
import torch
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close
from test_kernel_fused_moe import GPT_OSS_SWIGLU, dense_moe, make_moe
from test_kernel_int_weight_gemm import make_int_weight
from test_kernel_mxfp4 import make_mxfp4

from bulkinfer.kernels.expert_weights import ExpertWeights
from bulkinfer.kernels.fp8_gemm import FP8, FP8_MAX, dequantize_fp8
from bulkinfer.kernels.fused_moe import fused_moe_ref
from bulkinfer.kernels.mxfp4 import dequantize_mxfp4

FORMATS = ["fp8-per-tensor", "fp8-per-channel", "fp8-block", "int4-asym", "int4-sym", "int8-per-channel", "mxfp4"]


def quantized_experts(fmt: str, num_experts: int, n: int, k: int, dtype: torch.dtype, seed: int) -> ExpertWeights:
    """Random experts [num_experts, n, k] in ``fmt``, values of about 1/sqrt(k)."""
    gen = torch.Generator().manual_seed(seed)
    if fmt.startswith("fp8"):
        weight = (torch.randn(num_experts, n, k, generator=gen) * 100).clamp(-FP8_MAX, FP8_MAX).to(FP8)
        block_size, shape = {"fp8-per-tensor": (None, (num_experts,)), "fp8-per-channel": (None, (num_experts, n)),
                             "fp8-block": ((32, 32), (num_experts, -(-n // 32), -(-k // 32)))}[fmt]
        scale = (torch.rand(shape, generator=gen) + 0.5) / (100 * k ** 0.5)
        return ExpertWeights.fp8(weight.to(DEVICE), scale.to(DEVICE), block_size)
    if fmt == "mxfp4":
        blocks, scales = make_mxfp4(num_experts, n, k, seed=seed)
        scales = scales.int().remainder(4).add(127 - 7).to(torch.uint8)  # 2**-7 .. 2**-4: e2m1's 0..6 to ~1/sqrt(k)
        return ExpertWeights.mxfp4(blocks.to(DEVICE), scales.to(DEVICE))
    bits, symmetric, group = {"int4-asym": (4, False, 32), "int4-sym": (4, True, 32),
                              "int8-per-channel": (8, True, k)}[fmt]
    each = [make_int_weight(n, k, group, bits, symmetric, seed=seed + e) for e in range(num_experts)]
    zeros = torch.stack([w["zeros"] for w in each]).to(DEVICE) if not symmetric else None
    return ExpertWeights.int_weight(torch.stack([w["qweight"] for w in each]).to(DEVICE),
                                    torch.stack([w["scales"] for w in each]).to(DEVICE, dtype), zeros, group, bits)


@pytest.mark.parametrize("shape", [
    {"num_tokens": 1, "hidden": 64, "inter": 32, "num_experts": 4, "top_k": 2},
    {"num_tokens": 37, "hidden": 96, "inter": 64, "num_experts": 6, "top_k": 2},
], ids=["decode", "ragged"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_matches_reference_over_dequantized_experts(dtype, fmt, shape):
    pytest.importorskip("triton")
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    moe = make_moe(**shape, dtype=dtype)
    hidden, inter, experts = shape["hidden"], shape["inter"], shape["num_experts"]
    w13 = quantized_experts(fmt, experts, 2 * inter, hidden, dtype, seed=1)
    w2 = quantized_experts(fmt, experts, hidden, inter, dtype, seed=2)
    routing = {"topk_weights": moe["topk_weights"], "topk_ids": moe["topk_ids"]}
    expected = fused_moe_ref(moe["x"], w13, w2, **routing)
    assert_close(fused_moe_triton(moe["x"], w13, w2, **routing), expected)


@pytest.mark.parametrize("num_tokens", [1, 37])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_over_mxfp4_experts_with_gpt_oss_biases_and_clamps(dtype, num_tokens):
    """gpt-oss's experts as the model keeps them: MXFP4 weights, a gate/up bias and the clamped SwiGLU."""
    pytest.importorskip("triton")
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    moe = make_moe(num_tokens, 64, 32, num_experts=4, top_k=2, dtype=dtype)
    bias = torch.randn(4, 64, generator=torch.Generator().manual_seed(3)) * 6  # past the clamps at 7 for some
    gpt_oss = {"x": moe["x"], "w13": quantized_experts("mxfp4", 4, 64, 64, dtype, seed=1),
               "w2": quantized_experts("mxfp4", 4, 64, 32, dtype, seed=2), "topk_weights": moe["topk_weights"],
               "topk_ids": moe["topk_ids"], "w13_bias": bias.to(DEVICE, dtype), "clamped_swiglu": GPT_OSS_SWIGLU}
    expected = fused_moe_ref(**gpt_oss)
    unclamped = fused_moe_ref(**{**gpt_oss, "clamped_swiglu": (1e4, GPT_OSS_SWIGLU[1])})
    assert not torch.allclose(unclamped.float(), expected.float(), atol=1e-3)  # the clamps are reached
    # As for plain gpt-oss experts: a 16-bit dtype is held to its tolerance of the largest output.
    atol, rtol = (1e-4, 1e-4) if dtype == torch.float32 else (4e-3 * float(expected.abs().max()), 4e-3)
    torch.testing.assert_close(fused_moe_triton(**gpt_oss), expected, atol=atol, rtol=rtol)


def test_reference_over_quantized_experts_is_the_reference_over_their_dequantized_weights():
    moe = make_moe(9, 64, 32, num_experts=4, top_k=2, dtype=torch.float32)
    w13 = quantized_experts("int4-asym", 4, 64, 64, torch.float32, seed=1)
    w2 = quantized_experts("mxfp4", 4, 64, 32, torch.float32, seed=2)
    dense = [torch.stack([w.dequantize(e, torch.float32) for e in range(4)]) for w in (w13, w2)]
    routing = {"topk_weights": moe["topk_weights"], "topk_ids": moe["topk_ids"]}
    torch.testing.assert_close(fused_moe_ref(moe["x"], w13, w2, **routing), dense_moe(moe["x"], *dense, **routing),
                               atol=1e-5, rtol=1e-5)


def test_each_expert_dequantizes_as_its_own_weight():
    fp8 = quantized_experts("fp8-block", 3, 40, 96, torch.float32, seed=0)
    for expert in range(3):
        own = dequantize_fp8(fp8.data[expert], fp8.scales[expert], (32, 32), torch.float32)
        assert torch.equal(fp8.experts(torch.float32)[expert], own)
    per_tensor = quantized_experts("fp8-per-tensor", 3, 40, 96, torch.float32, seed=0)
    assert torch.equal(per_tensor.dequantize(2, torch.float32), per_tensor.data[2].float() * per_tensor.scales[2])
    blocks, scales = make_mxfp4(3, 40, 96)
    mxfp4 = ExpertWeights.mxfp4(blocks, scales)
    assert (mxfp4.n, mxfp4.k) == (40, 96)
    assert torch.equal(mxfp4.dequantize(1, torch.float32), dequantize_mxfp4(blocks, scales, torch.float32)[1])


def test_mismatched_experts_are_refused():
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    w13 = quantized_experts("int4-sym", 4, 64, 64, torch.float32, seed=0)
    w2 = quantized_experts("int4-sym", 4, 64, 64, torch.float32, seed=0)  # inter 64, not w13's 32
    with pytest.raises(ValueError, match="does not match w13"):
        fused_moe_triton(torch.zeros(2, 64), w13, w2, torch.ones(2, 1), torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="do not match scales"):
        ExpertWeights.int_weight(w13.data, w13.scales[:, :, :1], None, 32, 4)
