"""rms_norm_ref, which the CPU runs, computes in place where it may and gives the written-out formula's values."""

from __future__ import annotations

import pytest
import torch
from bulkinfer.kernels.rms_norm import rms_norm_ref


def written_out(x, weight, eps, residual):
    if residual is not None:
        x = x + residual
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype), x


@pytest.mark.parametrize("dtype,weight_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                (torch.bfloat16, torch.float32), (torch.float16, torch.float16)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_ref_gives_the_formulas_values_and_leaves_its_inputs(dtype, weight_dtype, with_residual):
    torch.manual_seed(0)
    x, residual = torch.randn(37, 96).to(dtype), torch.randn(37, 96).to(dtype) if with_residual else None
    weight = (torch.rand(96) + 0.5).to(weight_dtype)
    inputs = [t.clone() for t in (x, weight, residual) if t is not None]
    out, new_residual = rms_norm_ref(x, weight, 1e-6, residual)
    expected, summed = written_out(x, weight, 1e-6, residual)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    if with_residual:
        torch.testing.assert_close(new_residual, summed, atol=0, rtol=0)
    assert all(torch.equal(a, b) for a, b in zip(inputs, [t for t in (x, weight, residual) if t is not None]))
