"""silu_and_mul_triton against silu_and_mul_ref."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402

from bulkinfer.kernels.silu_mul import silu_and_mul_ref, silu_and_mul_triton  # noqa: E402


@pytest.mark.parametrize("shape", [(5, 2 * 64), (3, 2 * 1500), (2, 3, 2 * 96), (0, 2 * 64)])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_silu_and_mul_matches_reference(dtype, shape):
    x = torch.randn(shape, device=DEVICE, dtype=dtype) * 4
    assert_close(silu_and_mul_triton(x), silu_and_mul_ref(x))
