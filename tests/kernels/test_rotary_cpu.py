"""rotary_cpu: the reference's own results in fp32; within bf16 rounding of it in bf16, query and key
rotated together where they lie side by side in the fused projection."""

from __future__ import annotations

import pytest
import torch
from bulkinfer.kernels.rotary import _side_by_side, rotary_cpu, rotary_ref

from bulkinfer.layers.rotary import cos_sin_cache

HEADS, KV_HEADS, HEAD_DIM, TOKENS = 4, 2, 64, 9


def fused_projection(dtype: torch.dtype, rotary_dim: int = HEAD_DIM):
    """A fused qkv output and its query and key views (the first ``rotary_dim`` of each head)."""
    torch.manual_seed(0)
    fused = torch.randn(TOKENS, (HEADS + 2 * KV_HEADS) * HEAD_DIM).to(dtype)
    query = fused[:, :HEADS * HEAD_DIM].view(TOKENS, HEADS, HEAD_DIM)[..., :rotary_dim]
    key = fused[:, HEADS * HEAD_DIM:(HEADS + KV_HEADS) * HEAD_DIM].view(TOKENS, KV_HEADS, HEAD_DIM)[..., :rotary_dim]
    return fused, query, key


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 0.0), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("rotary_dim", [HEAD_DIM, 32])
def test_rotary_cpu_matches_the_reference(dtype, atol, rotary_dim):
    table = cos_sin_cache(rotary_dim, 512, 10000.0, None)
    positions = torch.tensor([0, 1, 2, 100, 511, 37, 37, 5, 6])
    fused, query, key = fused_projection(dtype, rotary_dim)
    expected, expected_q, expected_k = fused_projection(dtype, rotary_dim)
    rotary_ref(positions, expected_q, expected_k, table)
    rotary_cpu(positions, query, key, table)
    # Everything else (the heads' unrotated tail, the values) is left as it was.
    torch.testing.assert_close(fused, expected, atol=atol, rtol=atol)
    assert not torch.equal(fused, fused_projection(dtype, rotary_dim)[0])


def test_query_and_key_side_by_side_rotate_as_one_view():
    _, query, key = fused_projection(torch.bfloat16)
    (both,) = _side_by_side(query, key)
    assert both.shape == (TOKENS, HEADS + KV_HEADS, HEAD_DIM) and both.data_ptr() == query.data_ptr()
    assert len(_side_by_side(query, key.clone())) == 2  # apart in memory: two tensors
    assert len(_side_by_side(key, query)) == 2  # the other order is not side by side


def test_separate_query_and_key_rotate_too():
    table = cos_sin_cache(HEAD_DIM, 512, 10000.0, None)
    positions = torch.arange(TOKENS)
    query, key = torch.randn(TOKENS, HEADS, HEAD_DIM).bfloat16(), torch.randn(TOKENS, KV_HEADS, HEAD_DIM).bfloat16()
    expected_q, expected_k = query.clone(), key.clone()
    rotary_ref(positions, expected_q, expected_k, table)
    rotary_cpu(positions, query, key, table)
    torch.testing.assert_close(query, expected_q, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(key, expected_k, atol=2e-2, rtol=2e-2)
