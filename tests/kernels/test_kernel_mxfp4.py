"""MXFP4 dequantization against transformers' own (gpt-oss's loader), and the Triton tile loader
against the reference, value for value."""

from __future__ import annotations

import pytest
import torch
from kernel_testing import DEVICE

from bulkinfer.kernels._triton import jit, tl
from bulkinfer.kernels.mxfp4 import E2M1_VALUES, dequantize_mxfp4, mxfp4_weight_tile


def make_mxfp4(*shape: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ``blocks`` [*shape[:-1], K // 32, 16] and ``scales`` [..., K // 32] for a weight ``shape``;
    exponents around 2**0, and the extremes 0 (2**-127) and 250."""
    gen = torch.Generator().manual_seed(seed)
    *rows, k = shape
    blocks = torch.randint(0, 256, (*rows, k // 32, 16), generator=gen, dtype=torch.uint8)
    scales = torch.randint(120, 134, (*rows, k // 32), generator=gen, dtype=torch.uint8)
    scales.view(-1)[:2] = torch.tensor([0, 250], dtype=torch.uint8)
    return blocks, scales


def test_every_nibble_decodes_to_its_e2m1_value():
    blocks = torch.arange(256, dtype=torch.uint8).view(16, 16)  # each byte once: low nibble, then high
    weight = dequantize_mxfp4(blocks[None], torch.full((1, 16), 127, dtype=torch.uint8), torch.float32)
    expected = torch.tensor([[E2M1_VALUES[b & 15], E2M1_VALUES[b >> 4]] for b in range(256)]).flatten()
    assert torch.equal(weight.flatten(), expected)
    assert E2M1_VALUES[:8] == (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_transformers_gpt_oss_dequantization(dtype):
    mxfp4 = pytest.importorskip("transformers.integrations.mxfp4")
    blocks, scales = make_mxfp4(3, 40, 96)  # experts, out features, in features
    theirs = mxfp4.convert_moe_packed_tensors(blocks, scales, dtype=dtype)  # [experts, in, out]
    ours = dequantize_mxfp4(blocks, scales, dtype)
    assert ours.shape == (3, 40, 96)
    assert torch.equal(ours, theirs.transpose(1, 2))


def test_mismatched_scales_are_refused():
    blocks, scales = make_mxfp4(4, 64)
    with pytest.raises(ValueError, match="do not match"):
        dequantize_mxfp4(blocks, scales[:, :1], torch.float32)


@jit
def _dequantize_kernel(blocks_ptr, scales_ptr, out_ptr, n, k, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Each program writes one tile of the weight [n, k], as the fused MoE kernel loads it."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    tile = mxfp4_weight_tile(blocks_ptr, scales_ptr, k // 2, k // 32, cols, depth, depth < k, cols < n, tl.float32)
    tl.store(out_ptr + cols[None, :] * k + depth[:, None], tile, mask=(depth < k)[:, None] & (cols < n)[None, :])


def test_triton_tile_matches_reference():
    pytest.importorskip("triton")
    blocks, scales = make_mxfp4(40, 96)
    out = torch.empty(40, 96, device=DEVICE)
    _dequantize_kernel[(3, 2)](blocks.to(DEVICE), scales.to(DEVICE), out, 40, 96, BLOCK_N=16, BLOCK_K=64)
    assert torch.equal(out.cpu(), dequantize_mxfp4(blocks, scales, torch.float32))
