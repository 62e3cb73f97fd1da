"""fused_moe_ref against a dense computation of every expert, and fused_moe_triton against fused_moe_ref."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close

from bulkinfer.kernels.fused_moe import align_by_expert, choose_block_m, choose_gemm_tiles, fused_moe_ref
from bulkinfer.kernels.target import INTERPRETER, KNOWN_TARGETS


def make_moe(num_tokens: int, hidden: int, inter: int, num_experts: int, top_k: int, dtype: torch.dtype,
             seed: int = 0, skewed: bool = False) -> dict:
    """Random experts and routing; ``skewed`` sends most pairs to expert 0 and none to the last expert."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(num_tokens, num_experts, generator=gen)
    if skewed:
        scores[:, 0] += 3
        scores[:, -1] -= 100
    weights, ids = scores.softmax(-1).topk(top_k, dim=-1)
    moe = {
        "x": torch.randn(num_tokens, hidden, generator=gen),
        "w13": torch.randn(num_experts, 2 * inter, hidden, generator=gen) / hidden ** 0.5,
        "w2": torch.randn(num_experts, hidden, inter, generator=gen) / inter ** 0.5,
        "topk_weights": weights / weights.sum(-1, keepdim=True),
        "topk_ids": ids,
    }
    return {k: v.to(DEVICE, dtype if k != "topk_ids" else None) for k, v in moe.items()}


def dense_moe(x, w13, w2, topk_weights, topk_ids):
    """Every expert on every token, then each token's chosen experts weighted: obviously right, and slow."""
    gate, up = torch.einsum("th,eih->tei", x, w13).chunk(2, dim=-1)
    all_out = torch.einsum("tei,ehi->teh", F.silu(gate) * up, w2)  # [tokens, experts, hidden]
    chosen = all_out.gather(1, topk_ids[:, :, None].expand(-1, -1, x.shape[1]))
    return (chosen * topk_weights[:, :, None]).sum(1)


@pytest.mark.parametrize("skewed", [False, True], ids=["balanced", "skewed"])
def test_reference_matches_every_expert_computed_densely(skewed):
    moe = make_moe(37, 48, 24, num_experts=6, top_k=2, dtype=torch.float32, skewed=skewed)
    cpu = {k: v.cpu() for k, v in moe.items()}
    torch.testing.assert_close(fused_moe_ref(**cpu), dense_moe(**cpu), atol=1e-5, rtol=1e-5)


def test_alignment_pads_each_expert_to_whole_tiles():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2], [2, 0]])
    alignment = align_by_expert(ids.to(DEVICE), num_experts=4, block_m=4)
    sorted_pairs = alignment.sorted_pairs.cpu().tolist()
    pad = 8  # num_pairs: the padding marker
    # pairs' experts [2, 0, 2, 1, 0, 2, 2, 0]: expert 0 has pairs 1, 4, 7; expert 1 pair 3; expert 2
    # pairs 0, 2, 5, 6; expert 3 none
    assert sorted_pairs[:12] == [1, 4, 7, pad, 3, pad, pad, pad, 0, 2, 5, 6]
    assert set(sorted_pairs[12:]) <= {pad}
    assert alignment.num_padded.item() == 12
    assert alignment.block_experts.cpu().tolist()[:3] == [0, 1, 2]


def test_tile_choice_is_a_pure_function_of_shapes_and_target():
    sm_80, sm_86 = KNOWN_TARGETS["sm_80"], KNOWN_TARGETS["sm_86"]
    assert choose_block_m(8, 8) == 16 and choose_block_m(400, 8) == 32 and choose_block_m(800, 8) == 64
    tiles = choose_gemm_tiles(16, n=1536, k=2048, dtype=torch.float16, target=sm_80)
    assert (tiles.block_m, tiles.block_n, tiles.block_k, tiles.num_stages) == (16, 128, 64, 3)
    assert choose_gemm_tiles(64, n=24, k=20, dtype=torch.float32, target=sm_80).block_k == 32
    assert choose_gemm_tiles(16, n=1536, k=2048, dtype=torch.float16, target=sm_80) == tiles
    assert choose_gemm_tiles(16, n=1536, k=2048, dtype=torch.float16, target=INTERPRETER).num_stages == 1
    small = replace(sm_86, shared_memory=2 * (16 + 128) * 64 * 2)  # room for two stages only
    assert choose_gemm_tiles(16, n=1536, k=2048, dtype=torch.float16, target=small).num_stages == 2


@pytest.mark.parametrize("shape", [
    # decode: one tile per used expert
    {"num_tokens": 1, "hidden": 32, "inter": 16, "num_experts": 4, "top_k": 2},
    # widths not multiples of the tiles
    {"num_tokens": 37, "hidden": 48, "inter": 40, "num_experts": 6, "top_k": 2},
    {"num_tokens": 70, "hidden": 64, "inter": 32, "num_experts": 8, "top_k": 1},
    # every expert, 90 rows each: two row tiles
    {"num_tokens": 90, "hidden": 32, "inter": 16, "num_experts": 3, "top_k": 3},
    {"num_tokens": 0, "hidden": 32, "inter": 16, "num_experts": 4, "top_k": 2},
], ids=["decode", "ragged", "top1", "all-experts", "empty"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_matches_reference(dtype, shape):
    pytest.importorskip("triton")
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    moe = make_moe(**shape, dtype=dtype)
    assert_close(fused_moe_triton(**moe), fused_moe_ref(**moe))


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_with_idle_and_crowded_experts(dtype):
    pytest.importorskip("triton")
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    moe = make_moe(50, 32, 16, num_experts=5, top_k=2, dtype=dtype, skewed=True)
    assert_close(fused_moe_triton(**moe), fused_moe_ref(**moe))


@pytest.mark.parametrize("num_tokens,skewed", [(1, False), (40, False), (300, True)])
def test_the_cpu_path_matches_the_reference_and_triton_ops_carry_the_kernel(num_tokens, skewed):
    from bulkinfer.layers.ops import CPU_OPS, resolve_ops

    moe = make_moe(num_tokens, 64, 32, num_experts=8, top_k=2, dtype=torch.float32, skewed=skewed)
    moe = {k: v.cpu() for k, v in moe.items()}
    torch.testing.assert_close(CPU_OPS.fused_moe(**moe), dense_moe(**moe), atol=1e-5, rtol=1e-5)
    assert resolve_ops("auto", torch.device("cpu")).fused_moe is CPU_OPS.fused_moe
    pytest.importorskip("triton")
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    assert resolve_ops("triton", DEVICE).fused_moe is fused_moe_triton


def test_the_cpu_path_repacks_expert_weights_changed_in_place_or_replaced():
    from bulkinfer.layers.ops import CPU_OPS

    moe = {k: v.cpu() for k, v in make_moe(40, 64, 32, num_experts=8, top_k=2, dtype=torch.float32).items()}
    w13 = moe["w13"] = torch.nn.Parameter(moe["w13"], requires_grad=False)
    CPU_OPS.fused_moe(**moe)  # packs the weights
    w13.mul_(-2)
    torch.testing.assert_close(CPU_OPS.fused_moe(**moe), dense_moe(**moe), atol=1e-5, rtol=1e-5)
    w13.data = torch.randn_like(w13)
    torch.testing.assert_close(CPU_OPS.fused_moe(**moe), dense_moe(**moe), atol=1e-5, rtol=1e-5)


GPT_OSS_SWIGLU = (7.0, 1.702)  # gpt-oss's swiglu_limit and swiglu_alpha


def gpt_oss_moe(num_tokens: int, dtype: torch.dtype, seed: int = 1) -> dict:
    """A random MoE with gate/up biases, scaled up so the SwiGLU's clamps at 7 are reached."""
    moe = make_moe(num_tokens, 48, 24, num_experts=6, top_k=2, dtype=dtype, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    moe["w13"] = moe["w13"] * 4
    moe["w13_bias"] = torch.randn(6, 48, generator=gen).to(DEVICE, dtype)
    return {**moe, "clamped_swiglu": GPT_OSS_SWIGLU}


def test_gpt_oss_reference_matches_transformers_experts():
    """fused_moe_ref with the gate/up bias and the clamped SwiGLU, plus the weighted down bias, is transformers'
    GptOssExperts (its interleaved gate/up columns and [in, out] weights laid out from ours)."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    moe = {k: v.cpu() if torch.is_tensor(v) else v for k, v in gpt_oss_moe(40, torch.float32).items()}
    down_bias = torch.randn(6, 48, generator=torch.Generator().manual_seed(2))
    experts = GptOssExperts(GptOssConfig(hidden_size=48, intermediate_size=24, num_local_experts=6))
    gate, up = moe["w13"].chunk(2, dim=1)  # ours: gate rows, then up rows; theirs: interleaved columns
    bias_gate, bias_up = moe["w13_bias"].chunk(2, dim=1)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.stack([gate, up], dim=2).flatten(1, 2).transpose(1, 2))
        experts.gate_up_proj_bias.copy_(torch.stack([bias_gate, bias_up], dim=2).flatten(1, 2))
        experts.down_proj.copy_(moe["w2"].transpose(1, 2))
        experts.down_proj_bias.copy_(down_bias)
        expected = experts(moe["x"], moe["topk_ids"], moe["topk_weights"])
    ours = fused_moe_ref(**moe) + (moe["topk_weights"][..., None] * down_bias[moe["topk_ids"]]).sum(1)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    without_clamp = {**moe, "clamped_swiglu": (1e9, GPT_OSS_SWIGLU[1])}
    assert not torch.allclose(fused_moe_ref(**without_clamp), fused_moe_ref(**moe), atol=1e-3)  # clamps reached


@pytest.mark.parametrize("num_tokens", [1, 70])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_gpt_oss_experts_match_reference(dtype, num_tokens):
    pytest.importorskip("triton")
    from bulkinfer.kernels.fused_moe import fused_moe_triton

    moe = gpt_oss_moe(num_tokens, dtype)
    expected = fused_moe_ref(**moe)
    # Pre-activations past the clamps (|x| > 7) carry rounding of a few units of their own size into
    # outputs that may cancel to near zero: a 16-bit dtype is held to its tolerance of the largest output.
    if dtype == torch.float32:
        assert_close(fused_moe_triton(**moe), expected)
    else:
        torch.testing.assert_close(fused_moe_triton(**moe), expected, atol=4e-3 * float(expected.abs().max()),
                                   rtol=4e-3)
