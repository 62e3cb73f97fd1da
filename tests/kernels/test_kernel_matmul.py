"""The batch-invariant matmul against F.linear, and a row's result whatever rows share its call."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, INTERPRETED, assert_close

from bulkinfer.kernels.matmul import matmul_ref, matmul_tiles, matmul_triton
from bulkinfer.kernels.target import KNOWN_TARGETS, device_target


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows,n,k", [(1, 48, 40), (37, 100, 72), (70, 33, 130)])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_matches_linear(dtype, rows, n, k, bias):
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, k, generator=gen).to(DEVICE, dtype)
    weight = (torch.randn(n, k, generator=gen) / k ** 0.5).to(DEVICE, dtype)
    b = torch.randn(n, generator=gen).to(DEVICE, dtype) if bias else None
    assert_close(matmul_triton(x, weight, b), matmul_ref(x, weight, b))


def test_rows_do_not_depend_on_their_company():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(45, 64, generator=gen).to(DEVICE)
    weight = torch.randn(96, 64, generator=gen).to(DEVICE)
    whole = matmul_triton(x, weight)
    for start, count in _slices(matmul_tiles(96, 64, x.dtype, device_target(x.device)).block_m):
        assert torch.equal(matmul_triton(x[start:start + count], weight), whole[start:start + count])


def _slices(block_m: int) -> list[tuple[int, int]]:
    """(start, count) slices of a 45-row batch. The interpreter's tl.dot is numpy's BLAS, whose result
    for a row can change with the row's place inside the tile; a GPU's MMA does not. So in the
    interpreter slices start on a tile boundary and only the row count changes."""
    if INTERPRETED:
        return [(0, 1), (0, 17), (block_m, 1), (block_m, 45 - block_m), (2 * block_m, 3)]
    return [(0, 1), (3, 1), (5, 17), (30, 15)]


def test_launch_config_ignores_the_row_count():
    from bulkinfer.kernels.matmul import matmul_launch

    weight = torch.zeros(4096, 1024, dtype=torch.bfloat16)
    configs = set()
    for rows in (1, 8, 100, 4096):
        x = torch.zeros(rows, 1024, dtype=torch.bfloat16)
        launch = matmul_launch(x, weight, None, torch.empty(rows, 4096, dtype=torch.bfloat16), KNOWN_TARGETS["sm_90"])
        configs.add(tuple(sorted(launch.options.items())))
    assert len(configs) == 1
    assert matmul_tiles(4096, 1024, torch.bfloat16, KNOWN_TARGETS["sm_80"]).block_m == 64
