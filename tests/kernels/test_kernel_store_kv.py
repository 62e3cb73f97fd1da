"""store_kv_triton writes exactly what store_kv_ref writes, and nothing for padding slots."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS  # noqa: E402

from bulkinfer.kernels.store_kv import store_kv_ref, store_kv_triton  # noqa: E402


@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("num_kv_heads,head_dim", [(1, 64), (2, 128), (8, 96)])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_store_kv_matches_reference(dtype, num_kv_heads, head_dim, slot_dtype):
    num_tokens, num_blocks, block_size = 9, 5, 4
    # Keys and values as the model hands them over: strided views of one fused q/k/v projection.
    width = (4 + 2 * num_kv_heads) * head_dim
    qkv = torch.randn(num_tokens, width, device=DEVICE, dtype=dtype)
    key = qkv[:, 4 * head_dim:(4 + num_kv_heads) * head_dim].view(num_tokens, num_kv_heads, head_dim)
    value = qkv[:, (4 + num_kv_heads) * head_dim:].view(num_tokens, num_kv_heads, head_dim)
    slots = torch.tensor([0, 3, -1, 4, 19, -1, 7, 12, 8], device=DEVICE, dtype=slot_dtype)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    caches = [torch.full(shape, 7.0, device=DEVICE, dtype=dtype) for _ in range(4)]
    store_kv_ref(key, value, caches[0], caches[1], slots.long())
    store_kv_triton(key, value, caches[2], caches[3], slots)
    assert torch.equal(caches[2], caches[0])
    assert torch.equal(caches[3], caches[1])


def test_store_kv_rejects_a_mismatched_cache():
    key = torch.randn(2, 2, 64, device=DEVICE)
    cache = torch.zeros(3, 4, 4, 64, device=DEVICE)
    with pytest.raises(ValueError, match="KV cache"):
        store_kv_triton(key, key, cache, cache, torch.zeros(2, dtype=torch.long, device=DEVICE))
