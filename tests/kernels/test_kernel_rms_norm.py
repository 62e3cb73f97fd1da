"""rms_norm_triton against rms_norm_ref, with and without the fused residual add."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402

from bulkinfer.kernels.rms_norm import rms_norm_ref, rms_norm_triton  # noqa: E402


@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("hidden", [64, 96, 1000, 2048])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_rms_norm_matches_reference(dtype, hidden, with_residual):
    x = torch.randn(5, hidden, device=DEVICE, dtype=dtype)
    weight = torch.randn(hidden, device=DEVICE, dtype=dtype)
    residual = torch.randn_like(x) if with_residual else None
    x_before = x.clone()
    expected, expected_residual = rms_norm_ref(x, weight, 1e-6, residual)
    actual, actual_residual = rms_norm_triton(x, weight, 1e-6, residual)
    assert_close(actual, expected)
    assert torch.equal(x, x_before)  # the inputs are not written
    if with_residual:
        assert torch.equal(actual_residual, expected_residual)  # the sum is rounded like the reference's
    else:
        assert actual_residual is None


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_rms_norm_per_head_rows_and_fp32_weight(dtype):
    # q/k norm: every head's row normed on its own; an fp32 weight promotes the output to fp32.
    x = torch.randn(3, 4, 128, device=DEVICE, dtype=dtype)
    weight = torch.randn(128, device=DEVICE)
    expected, _ = rms_norm_ref(x, weight, 1e-5)
    actual, _ = rms_norm_triton(x, weight, 1e-5)
    assert actual.dtype == expected.dtype == torch.float32
    assert_close(actual.to(dtype), expected.to(dtype))


def test_rms_norm_empty_batch():
    x = torch.randn(0, 64, device=DEVICE)
    out, residual = rms_norm_triton(x, torch.ones(64, device=DEVICE), 1e-6, torch.randn(0, 64, device=DEVICE))
    assert out.shape == residual.shape == (0, 64)
