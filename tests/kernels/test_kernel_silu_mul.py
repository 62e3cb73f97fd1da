"""silu_and_mul_triton against silu_and_mul_ref, and with gpt-oss's clamps against clamped_swiglu_ref."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402

from bulkinfer.kernels.silu_mul import clamped_swiglu_ref, silu_and_mul_ref, silu_and_mul_triton  # noqa: E402


@pytest.mark.parametrize("shape", [(5, 2 * 64), (3, 2 * 1500), (2, 3, 2 * 96), (0, 2 * 64)])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_silu_and_mul_matches_reference(dtype, shape):
    x = torch.randn(shape, device=DEVICE, dtype=dtype) * 4
    assert_close(silu_and_mul_triton(x), silu_and_mul_ref(x))


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_clamped_swiglu_matches_reference(dtype):
    x = torch.randn(7, 2 * 96, device=DEVICE, dtype=dtype) * 6  # past gpt-oss's limit of 7 on both sides
    limit, alpha = 7.0, 1.702
    expected = clamped_swiglu_ref(x.float(), limit, alpha).to(dtype)
    assert_close(silu_and_mul_triton(x, (limit, alpha)), expected)
