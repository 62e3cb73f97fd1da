"""The quantized linear layer's own arithmetic: the canonical packing against compressed-tensors' packer, and
torch's packed CPU kernels against dequantize-then-multiply."""

from __future__ import annotations

import pytest
import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

from bulkinfer.layers.quantized_linear import QuantizedLinear
from bulkinfer.kernels.fp8_gemm import dequantize_fp8, fp8_tensor_cores, quantize_fp8_activations
from bulkinfer.kernels.int_weight_gemm import pack_int_weight, unpack_int_weight
from bulkinfer.kernels.target import device_target
from bulkinfer.layers.quantized_weights import WeightFormat


@pytest.mark.parametrize("bits", [4, 8])
def test_canonical_packing_is_compressed_tensors_packing(bits):
    """Unsigned values in compressed-tensors' word order: its packer (signed input, offset inside) agrees."""
    q = torch.randint(0, 2 ** bits, (6, 64), generator=torch.Generator().manual_seed(bits), dtype=torch.uint8)
    packed = pack_int_weight(q, bits)
    assert torch.equal(packed, pack_to_int32((q.to(torch.int16) - 2 ** (bits - 1)).to(torch.int8), bits))
    assert torch.equal(unpack_int_weight(packed, bits), q)


def test_fp8_dequantization_by_bits_is_the_conversion():
    codes = (torch.arange(64 * 96) % 256).view(64, 96)
    codes = torch.where(codes & 0x7F == 0x7F, 0, codes)  # every byte but the two NaNs
    weight = codes.to(torch.uint8).view(torch.float8_e4m3fn)
    scale = torch.rand(2, 3)
    expected = weight.float() * scale.repeat_interleave(32, 0).repeat_interleave(32, 1)
    assert torch.equal(dequantize_fp8(weight, scale, (32, 32), torch.float32), expected)


def random_layer(fmt: WeightFormat) -> QuantizedLinear:
    generator = torch.Generator().manual_seed(0)
    layer = QuantizedLinear(256, 96, fmt, bias=True)
    q = torch.randint(0, 2 ** fmt.bits, (96, 256), generator=generator, dtype=torch.uint8)
    layer.qweight.data = pack_int_weight(q, fmt.bits)
    layer.scales.data = torch.rand(layer.scales.shape, generator=generator) / 16
    if layer.zeros is not None:
        layer.zeros.data = torch.randint(0, 16, layer.zeros.shape, generator=generator, dtype=torch.uint8)
    layer.bias.data = torch.randn(96, generator=generator)
    return layer


@pytest.mark.parametrize("fmt", [WeightFormat("int", 4, 32), WeightFormat("int", 4, 128, symmetric=False),
                                 WeightFormat("int", 8)], ids=["int4-g32", "int4-g128-asym", "int8-channel"])
def test_packed_cpu_kernels_match_dequantizing(fmt):
    """bfloat16 decode-sized batches take torch's packed kernels; within bfloat16 rounding of the plain product."""
    layer = random_layer(fmt).to(torch.bfloat16)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(1))
    expected = torch.nn.functional.linear(x, layer.dequantized(torch.float32), layer.bias.float())
    got = layer(x.bfloat16()).float()
    assert hasattr(layer.qweight, "_cpu_packed")  # the packed kernel ran
    torch.testing.assert_close(got, expected, atol=0.02 * expected.abs().max().item(), rtol=0)


def test_prefill_sized_and_float32_batches_dequantize():
    layer = random_layer(WeightFormat("int", 4, 32))
    layer(torch.randn(64, 256))
    layer.to(torch.bfloat16)(torch.randn(64, 256, dtype=torch.bfloat16))
    assert not hasattr(layer.qweight, "_cpu_packed")


def fp8_layer(block_size: tuple[int, int] | None) -> QuantizedLinear:
    generator = torch.Generator().manual_seed(2)
    layer = QuantizedLinear(256, 96, WeightFormat("fp8", block_size=block_size), bias=False)
    layer.weight.data = (torch.randn(96, 256, generator=generator) * 100).to(torch.float8_e4m3fn)
    layer.weight_scale.data = torch.rand(layer.weight_scale.shape, generator=generator) / 100
    return layer


@pytest.mark.parametrize("layer", [
    random_layer(WeightFormat("int", 4, 32)), random_layer(WeightFormat("int", 4, 128, symmetric=False)),
    random_layer(WeightFormat("int", 8)), fp8_layer((32, 64)), fp8_layer(None),
], ids=["int4-g32", "int4-g128-asym", "int8-channel", "fp8-blocks", "fp8-channel"])
def test_the_gpu_kernels_read_the_layers_layout(layer):
    """The layer's GPU matmul (the Triton kernels, in the interpreter here) on the layout the loaders write:
    the same product as the plain weight's."""
    x = torch.randn(6, 256, generator=torch.Generator().manual_seed(3), dtype=torch.float16)
    activations = x.float()
    if layer.format.kind == "fp8" and fp8_tensor_cores(device_target(x.device)):
        # FP8 tensor cores multiply the activations as FP8 too, a scale per row and group of the weight's K.
        group = layer.format.block_size[1] if layer.format.block_size else 256
        values, scales = quantize_fp8_activations(activations, group)
        activations = values.float() * scales.repeat_interleave(group, 1)
    expected = torch.nn.functional.linear(activations, layer.dequantized(torch.float32))
    got = layer._gpu_matmul(x).float()
    torch.testing.assert_close(got, expected, atol=0.02 * expected.abs().max().item(), rtol=0)
