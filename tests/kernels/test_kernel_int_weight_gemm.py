"""INT4/INT8 weight-only GEMM: the packing against compressed-tensors', the reference against torch's
int8 matmul and compressed-tensors' dequantization, the Triton kernel against the reference."""

from __future__ import annotations

import pytest
import torch
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close

from bulkinfer.kernels.int_weight_gemm import int_weight_gemm_ref, pack_int_weight, unpack_int_weight


def make_int_weight(n: int, k: int, group_size: int, bits: int, symmetric: bool, seed: int = 0) -> dict:
    """Random unsigned values, scales around 1/sqrt(k), zero points anywhere in range (or none)."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 2 ** bits, (n, k), generator=gen, dtype=torch.uint8)
    scales = (torch.rand(n, k // group_size, generator=gen) + 0.5) / (k ** 0.5 * 2 ** (bits - 2))
    zeros = None if symmetric else torch.randint(0, 2 ** bits, (n, k // group_size), generator=gen, dtype=torch.uint8)
    return {"q": q, "qweight": pack_int_weight(q, bits), "scales": scales, "zeros": zeros,
            "group_size": group_size, "bits": bits}


def kernel_args(weight: dict, dtype: torch.dtype) -> dict:
    return {"qweight": weight["qweight"].to(DEVICE), "scales": weight["scales"].to(DEVICE, dtype),
            "zeros": weight["zeros"].to(DEVICE) if weight["zeros"] is not None else None,
            "group_size": weight["group_size"], "bits": weight["bits"]}


@pytest.mark.parametrize("bits", [4, 8])
def test_packing_matches_compressed_tensors(bits):
    helpers = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    q = make_int_weight(24, 64, 32, bits, symmetric=True)["q"]
    signed = (q.to(torch.int16) - 2 ** (bits - 1)).to(torch.int8)  # compressed-tensors packs signed values
    packed = helpers.pack_to_int32(signed, bits)
    assert torch.equal(pack_int_weight(q, bits), packed)
    assert torch.equal(unpack_int_weight(packed, bits), q)
    assert torch.equal(helpers.unpack_from_int32(pack_int_weight(q, bits), bits, q.shape), signed)


def test_reference_int8_per_channel_matches_torch_int8_matmul():
    weight = make_int_weight(40, 96, 96, 8, symmetric=True)
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(1))
    signed = (weight["q"].to(torch.int16) - 128).to(torch.int8)
    expected = torch._weight_int8pack_mm(x, signed, weight["scales"][:, 0].contiguous())
    actual = int_weight_gemm_ref(x, weight["qweight"], weight["scales"], None, 96, 8)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("bits,symmetric,group_size", [(4, True, 32), (4, False, 32), (8, False, 64),
                                                       (4, False, 128)])
def test_reference_matches_compressed_tensors_dequantize(bits, symmetric, group_size):
    forward = pytest.importorskip("compressed_tensors.quantization.lifecycle.forward")
    from compressed_tensors.quantization import QuantizationArgs

    weight = make_int_weight(24, 128, group_size, bits, symmetric)
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(1))
    offset = 2 ** (bits - 1)
    zero_point = (weight["zeros"].to(torch.int16) - offset).to(torch.int8) if not symmetric else None
    args = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy="group", group_size=group_size)
    dequantized = forward.dequantize((weight["q"].to(torch.int16) - offset).to(torch.int8), weight["scales"],
                                     zero_point, args, dtype=torch.float32)
    actual = int_weight_gemm_ref(x, weight["qweight"], weight["scales"], weight["zeros"], group_size, bits)
    torch.testing.assert_close(actual, x @ dequantized.T, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rows,n,k,group_size", [
    (1, 48, 64, 32),  # decode
    (37, 100, 96, 32),  # rows and columns off the tiles; the last K tile holds half a tile of groups
    (70, 33, 160, 160),  # one scale per channel, K off the tile
], ids=["decode", "ragged", "per-channel"])
@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, True), (8, False)],
                         ids=["int4-sym", "int4-asym", "int8-sym", "int8-asym"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_matches_reference(dtype, bits, symmetric, rows, n, k, group_size):
    pytest.importorskip("triton")
    from bulkinfer.kernels.int_weight_gemm import int_weight_gemm

    args = kernel_args(make_int_weight(n, k, group_size, bits, symmetric, seed=rows), dtype)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(2)).to(DEVICE, dtype)
    assert_close(int_weight_gemm(x, **args), int_weight_gemm_ref(x, **args))


def test_decode_spreads_its_columns_over_every_multiprocessor():
    from bulkinfer.kernels.int_weight_gemm import int_gemm_tiles
    from bulkinfer.kernels.target import KNOWN_TARGETS

    sm_90 = KNOWN_TARGETS["sm_90"]  # 132 multiprocessors
    assert int_gemm_tiles(1, 4096, 4096, torch.bfloat16, sm_90).block_n == 32  # 128 programs, not 32
    assert int_gemm_tiles(1, 16384, 4096, torch.bfloat16, sm_90).block_n == 64  # 128 would give 128 programs
    assert int_gemm_tiles(1, 32768, 4096, torch.bfloat16, sm_90).block_n == 128
    assert int_gemm_tiles(512, 4096, 4096, torch.bfloat16, sm_90).block_n == 64  # prefill: rows fill the GPU


def test_mismatched_groups_are_refused():
    weight = make_int_weight(8, 64, 32, 4, symmetric=False)
    x = torch.randn(2, 64)
    with pytest.raises(ValueError, match="group_size 48 does not divide K = 64"):
        int_weight_gemm_ref(x, weight["qweight"], weight["scales"], weight["zeros"], 48, 4)
    with pytest.raises(ValueError, match="must both be"):
        int_weight_gemm_ref(x, weight["qweight"], weight["scales"], weight["zeros"], 16, 4)
    with pytest.raises(ValueError, match="3 bits"):
        int_weight_gemm_ref(x, weight["qweight"], weight["scales"], None, 32, 3)
