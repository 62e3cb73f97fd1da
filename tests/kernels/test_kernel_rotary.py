"""rotary_triton rotates query and key in place exactly as rotary_ref does."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402

from bulkinfer.kernels.rotary import rotary_ref, rotary_triton  # noqa: E402
from bulkinfer.layers.rotary import cos_sin_cache  # noqa: E402

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


@pytest.mark.parametrize("scaling", [None, LLAMA3], ids=["plain", "llama3"])
@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim", [(4, 1, 64), (8, 8, 128), (6, 2, 80)])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_rotary_matches_reference(dtype, num_heads, num_kv_heads, head_dim, scaling):
    num_tokens, max_position = 7, 512
    table = cos_sin_cache(head_dim, max_position, 10000.0, scaling).to(DEVICE)
    positions = torch.tensor([0, 1, 2, 100, 511, 37, 37], device=DEVICE)
    # The query as a strided view of a fused projection: rotated in place through the view.
    fused = torch.randn(num_tokens, (num_heads + 1) * head_dim, device=DEVICE, dtype=dtype)
    query = fused[:, :num_heads * head_dim].view(num_tokens, num_heads, head_dim)
    key = torch.randn(num_tokens, num_kv_heads, head_dim, device=DEVICE, dtype=dtype)
    expected_q, expected_k = query.clone(), key.clone()
    rotary_ref(positions, expected_q, expected_k, table)
    tail = fused[:, num_heads * head_dim:].clone()
    rotary_triton(positions, query, key, table)
    assert_close(query, expected_q)
    assert_close(key, expected_k)
    assert torch.equal(fused[:, num_heads * head_dim:], tail)  # nothing outside the view is written
