"""What every kernel test shares: the device, the dtypes worth testing there, and tolerances."""

from __future__ import annotations

import os

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRETED else "cpu")

# The interpreter computes bf16 wrongly (seen with tl.dot), so bf16 is tested on the GPU only.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.type == "cuda" else [])
DTYPE_PARAMS = [pytest.param(dtype, id=str(dtype).removeprefix("torch.")) for dtype in DTYPES]

_TOLERANCE = {  # (atol, rtol): a few units in the last place of each dtype, after fp32 accumulation
    torch.float32: (1e-4, 1e-4),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3e-2, 3e-2),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    atol, rtol = _TOLERANCE[expected.dtype]
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)
