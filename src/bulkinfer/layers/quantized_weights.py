"""How a quantized linear layer holds its weight in memory, and how that weight becomes a plain one.

Every checkpoint format is repacked at load time into one of two layouts, so the layer and the GPU
kernels know only these:

- integer weight-only (GPTQ, AWQ, compressed-tensors' pack- and naive-quantized):
  ``qweight`` int32 [N, K * bits / 32], packed along K (element k of row n sits in word
  k // (32 / bits) at bit (k % (32 / bits)) * bits, unsigned); ``scales`` [N, K / group_size] in
  the compute dtype; ``zeros`` uint8 [N, K / group_size], or none for a symmetric weight (zero
  point 2 ** (bits - 1)); ``perm`` int64 [K] when the input columns were reordered so that each
  group is contiguous (GPTQ's act-order): the layer multiplies ``x[:, perm]``.
  W[n, k] = (q[n, k] - z[n, k // group_size]) * s[n, k // group_size].
- FP8 (``quant_method: fp8`` and compressed-tensors' float-quantized): ``weight`` float8_e4m3fn
  [N, K]; ``weight_scale`` float32 [N] (a scale per output row), or
  [ceil(N / bn), ceil(K / bk)] for blocks of (bn, bk). W = weight * scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

INT_BITS = (4, 8)


@dataclass(frozen=True)
class WeightFormat:
    """The in-memory layout of one quantized linear layer's weight."""

    kind: str  # "int" (integer weight-only) or "fp8"
    bits: int = 8
    group_size: int | None = None  # int: input columns per scale; None: one scale per output row
    symmetric: bool = True  # int: zero point 2 ** (bits - 1), no zeros tensor
    act_order: bool = False  # int: input columns reordered, a perm kept
    block_size: tuple[int, int] | None = None  # fp8: (bn, bk) block scales; None: one scale per output row

    def describe(self) -> str:
        """For people: e.g. ``int4 weight-only, groups of 128, asymmetric``."""
        if self.kind == "fp8":
            scales = f"{self.block_size[0]}x{self.block_size[1]} block scales" if self.block_size else "per-channel scales"
            return f"fp8 e4m3, {scales}"
        groups = f"groups of {self.group_size}" if self.group_size else "per-channel scales"
        extras = ("" if self.symmetric else ", asymmetric") + (", act-order" if self.act_order else "")
        return f"int{self.bits} weight-only, {groups}{extras}"

    def groups(self, in_features: int) -> int:
        """Scales per output row of an integer weight."""
        return in_features // self.group_size if self.group_size else 1

    def scale_shape(self, out_features: int, in_features: int) -> tuple[int, ...]:
        if self.kind == "int":
            return (out_features, self.groups(in_features))
        if self.block_size is None:
            return (out_features,)
        bn, bk = self.block_size
        return (-(-out_features // bn), -(-in_features // bk))


def pack_along_k(q: torch.Tensor, bits: int) -> torch.Tensor:
    """Unsigned values [N, K] (each in [0, 2 ** bits)) -> int32 [N, K * bits / 32], the canonical packing."""
    per_word = 32 // bits
    q = q.to(torch.int64).reshape(q.shape[0], -1, per_word)
    shifts = torch.arange(per_word, device=q.device, dtype=torch.int64) * bits
    words = (q << shifts).sum(-1)
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def unpack_along_k(qweight: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [N, K * bits / 32] -> the unsigned values [N, K] as uint8.

    Read as bytes (words are little-endian on every platform torch runs on): an 8-bit value is a
    byte, two 4-bit values share one, low nibble first. Five to ten times faster than shifting words.
    """
    data = qweight.contiguous().view(torch.uint8)
    if bits == 8:
        return data
    return torch.stack((data & 0xF, data >> 4), dim=-1).view(qweight.shape[0], -1)


def dequantize_int(qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
                   fmt: WeightFormat) -> torch.Tensor:
    """The plain weight [N, K] in the scales' dtype (input columns in the stored order)."""
    n, groups = scales.shape
    q = unpack_along_k(qweight, fmt.bits).view(n, groups, -1).to(scales.dtype)
    zero = 2 ** (fmt.bits - 1) if zeros is None else zeros.to(scales.dtype)[..., None]
    return ((q - zero) * scales[..., None]).view(n, -1)


def dequantize_fp8(weight: torch.Tensor, weight_scale: torch.Tensor, block_size: tuple[int, int] | None,
                   dtype: torch.dtype) -> torch.Tensor:
    """The plain weight [N, K] in ``dtype``; scales applied in fp32, as the GPU kernel does."""
    n, k = weight.shape
    if block_size is None:
        scale = weight_scale[:, None]
    else:
        scale = weight_scale.repeat_interleave(block_size[0], 0)[:n].repeat_interleave(block_size[1], 1)[:, :k]
    return (fp8_as_float16(weight).float() * (scale * 256)).to(dtype)


def fp8_as_float16(weight: torch.Tensor) -> torch.Tensor:
    """e4m3 values / 256 as float16, exactly: e4m3's sign, exponent and mantissa bits moved into
    float16's places, which leaves the exponent 8 short (its bias is 15, e4m3's 7). On the CPU the
    conversion torch has runs at about 10 ns a value; this takes a third of that."""
    bits = weight.view(torch.uint8).to(torch.int16)
    return (((bits & 0x80) << 8) | ((bits & 0x7F) << 7)).view(torch.float16)


def add_quantized_parameters(module: nn.Module, fmt: WeightFormat, out_features: int, in_features: int,
                             leading: tuple[int, ...] = ()) -> None:
    """Give ``module`` empty parameters in ``fmt``'s layout for weights [*leading, out, in]: ``qweight``,
    ``scales``, ``zeros`` (None if symmetric); or ``weight``, ``weight_scale``."""
    scale_shape = (*leading, *fmt.scale_shape(out_features, in_features))
    if fmt.kind == "int":
        module.qweight = _frozen((*leading, out_features, in_features * fmt.bits // 32), torch.int32)
        module.scales = _frozen(scale_shape)
        module.zeros = None if fmt.symmetric else _frozen(scale_shape, torch.uint8)
    else:
        module.weight = _frozen((*leading, out_features, in_features), torch.float8_e4m3fn)
        module.weight_scale = _frozen(scale_shape, torch.float32)


def split_dims(module: nn.Module, fmt: WeightFormat, split: int | None) -> None:
    """Mark which dimension of each checkpoint tensor (one expert's, for a stack) ranks split (``tp_dim``,
    as a plain layer's): ``split`` 0, the output rows, splits every tensor by rows; 1, the input columns,
    splits the weight and whatever has a column per group of inputs, and leaves a scale per output row
    whole. None: nothing is split."""
    if split is None:
        return
    by_columns = {"qweight": True, "weight": True, "scales": fmt.group_size is not None,
                  "zeros": fmt.group_size is not None, "weight_scale": fmt.block_size is not None}
    for name, param in module.named_parameters(recurse=False):
        if split == 0 and name != "perm":
            param.tp_dim = 0
        elif split == 1 and by_columns.get(name, False):
            param.tp_dim = 1


def dequantize(module: nn.Module, fmt: WeightFormat, dtype: torch.dtype, *index: int) -> torch.Tensor:
    """The plain weight [out, in] in ``dtype`` of a module given add_quantized_parameters (``index``: which
    of its leading dimensions' weights)."""
    if fmt.kind == "int":
        zeros = None if module.zeros is None else module.zeros[index]
        return dequantize_int(module.qweight[index], module.scales[index], zeros, fmt).to(dtype)
    return dequantize_fp8(module.weight[index], module.weight_scale[index], fmt.block_size, dtype)


def _frozen(shape: tuple[int, ...], dtype: torch.dtype | None = None) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
