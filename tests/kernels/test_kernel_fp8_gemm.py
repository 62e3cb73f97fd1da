"""FP8 GEMM: the dequantization against transformers' and compressed-tensors', the activation
quantization, and the Triton kernel in both of its modes (FP8 dot, weight-only) against the reference."""

from __future__ import annotations

import pytest
import torch
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close

from bulkinfer.kernels.fp8_gemm import (
    FP8,
    FP8_MAX,
    block_scales,
    dequantize_fp8,
    fp8_gemm_ref,
    fp8_tensor_cores,
    quantize_fp8_activations,
)
from bulkinfer.kernels.target import INTERPRETER, KNOWN_TARGETS

SCALINGS = {  # name: (scale shape from (n, k), block_size)
    "per-tensor": (lambda n, k: (1,), None),
    "per-channel": (lambda n, k: (n,), None),
    "block-128": (lambda n, k: (-(-n // 128), -(-k // 128)), (128, 128)),
    "block-32x64": (lambda n, k: (-(-n // 32), -(-k // 64)), (32, 64)),
}


FINITE_FP8_CODES = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.uint8)  # 0x7F: NaN


def make_fp8_weight(n: int, k: int, scaling: str, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    shape, block_size = SCALINGS[scaling]
    weight = (torch.randn(n, k, generator=gen) * 100).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    weight.view(torch.uint8).view(-1)[:254] = FINITE_FP8_CODES  # every value once, subnormals and extremes
    scale = (torch.rand(shape(n, k), generator=gen) + 0.5) / (100 * k ** 0.5)
    return {"weight": weight, "weight_scale": scale, "block_size": block_size}


@pytest.mark.parametrize("scaling", ["per-tensor", "block-128", "block-32x64"])
def test_dequantize_matches_transformers(scaling):
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    w = make_fp8_weight(200, 320, scaling)  # blocks cut at both edges
    theirs = fp8._dequantize_fp8_weight(w["weight"], w["weight_scale"], w["block_size"], torch.float32)
    assert torch.equal(dequantize_fp8(**w, dtype=torch.float32), theirs)


def test_dequantize_per_channel_matches_compressed_tensors():
    forward = pytest.importorskip("compressed_tensors.quantization.lifecycle.forward")
    from compressed_tensors.quantization import QuantizationArgs

    w = make_fp8_weight(40, 96, "per-channel")
    args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel")
    theirs = forward.dequantize(w["weight"], w["weight_scale"][:, None], None, args, dtype=torch.float32)
    assert torch.equal(dequantize_fp8(**w, dtype=torch.float32), theirs)


def test_activations_are_quantized_per_row_and_group():
    x = torch.randn(5, 100, generator=torch.Generator().manual_seed(3)) * torch.arange(1, 6)[:, None]
    x[4] = 0  # an all-zero row stays zero
    values, scales = quantize_fp8_activations(x, 64)
    assert values.dtype == FP8 and values.shape == (5, 100) and scales.shape == (5, 2)
    group_max = torch.nn.functional.pad(values.float().abs(), (0, 28)).view(5, 2, 64).amax(-1)
    assert torch.equal(group_max[:4], torch.full((4, 2), FP8_MAX))  # each group's largest value maps to 448
    assert not values[4].float().any()
    restored = values.float() * scales.repeat_interleave(64, 1)[:, :100]
    torch.testing.assert_close(restored, x, rtol=2 ** -4, atol=1e-6)  # e4m3 keeps 3 mantissa bits


def test_scale_shapes_are_read_as_block_grids():
    weight = torch.zeros(6, 10, dtype=FP8)
    assert (block_scales(weight, torch.ones(1), None).block_n, block_scales(weight, torch.ones(1), None).block_k) == (6, 10)
    per_channel = block_scales(weight, torch.ones(6, 1), None)
    assert (per_channel.scales.shape, per_channel.block_n, per_channel.block_k) == ((6, 1), 1, 10)
    with pytest.raises(ValueError, match="do not cover"):
        block_scales(weight, torch.ones(2, 2), (4, 4))
    with pytest.raises(ValueError, match="neither per tensor"):
        block_scales(weight, torch.ones(3), None)


def test_tensor_cores_only_where_the_gpu_has_fp8():
    assert not fp8_tensor_cores(KNOWN_TARGETS["sm_80"]) and not fp8_tensor_cores(KNOWN_TARGETS["sm_86"])
    assert fp8_tensor_cores(KNOWN_TARGETS["sm_90"]) and fp8_tensor_cores(INTERPRETER)


def run_kernel(x: torch.Tensor, w: dict, fp8_dot: bool) -> torch.Tensor:
    """The kernel in the mode the GPU would choose, on this test's device."""
    from bulkinfer.kernels.fp8_gemm import fp8_gemm_launch
    from bulkinfer.kernels.target import device_target

    scales = block_scales(w["weight"], w["weight_scale"], w["block_size"])
    activations, activation_scales = quantize_fp8_activations(x, scales.block_k) if fp8_dot else (x, None)
    out = torch.empty(x.shape[0], w["weight"].shape[0], dtype=x.dtype, device=x.device)
    fp8_gemm_launch(activations, activation_scales, w["weight"], scales, out, device_target(x.device))()
    return out


@pytest.mark.parametrize("rows,n,k", [(1, 48, 128), (37, 200, 320)], ids=["decode", "ragged"])
@pytest.mark.parametrize("scaling", list(SCALINGS))
@pytest.mark.parametrize("fp8_dot", [True, False], ids=["fp8-dot", "weight-only"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_matches_reference(dtype, fp8_dot, scaling, rows, n, k):
    pytest.importorskip("triton")
    w = {key: v.to(DEVICE) if torch.is_tensor(v) else v for key, v in make_fp8_weight(n, k, scaling, rows).items()}
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(2)).to(DEVICE, dtype)
    assert_close(run_kernel(x, w, fp8_dot), fp8_gemm_ref(x, **w, quantize_activations=fp8_dot))


def test_public_entry_takes_the_devices_mode():
    pytest.importorskip("triton")
    from bulkinfer.kernels.fp8_gemm import fp8_gemm
    from bulkinfer.kernels.target import device_target

    w = {key: v.to(DEVICE) if torch.is_tensor(v) else v for key, v in make_fp8_weight(64, 256, "block-128").items()}
    x = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(2)).to(DEVICE, torch.float16)
    expected = fp8_gemm_ref(x.view(6, 256), **w, quantize_activations=fp8_tensor_cores(device_target(x.device)))
    assert_close(fp8_gemm(x, **w), expected.view(2, 3, 64))
