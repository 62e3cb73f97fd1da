"""How a quantized linear layer holds its weight in memory, and how that weight becomes a plain one.

Every checkpoint format is repacked at load time into one of two layouts, the GPU kernels' own
(kernels/int_weight_gemm.py, kernels/fp8_gemm.py), so the layer and the kernels know only these:

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

gpt-oss's MXFP4 experts keep the checkpoint's own layout, which the fused MoE kernel reads
(kernels/mxfp4.py): ``blocks`` uint8 [N, K / 32, 16], ``scales`` uint8 e8m0 [N, K / 32].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bulkinfer.kernels.fp8_gemm import dequantize_fp8
from bulkinfer.kernels.int_weight_gemm import dequantize_int_weight

INT_BITS = (4, 8)


@dataclass(frozen=True)
class WeightFormat:
    """The in-memory layout of one quantized linear layer's weight."""

    kind: str  # "int" (integer weight-only), "fp8" or "mxfp4" (experts only)
    bits: int = 8
    group_size: int | None = None  # int, mxfp4: input columns per scale; None: one scale per output row
    symmetric: bool = True  # int: zero point 2 ** (bits - 1), no zeros tensor
    act_order: bool = False  # int: input columns reordered, a perm kept
    block_size: tuple[int, int] | None = None  # fp8: (bn, bk) block scales; None: one scale per output row

    def describe(self) -> str:
        """For people: e.g. ``int4 weight-only, groups of 128, asymmetric``."""
        if self.kind == "mxfp4":
            return "mxfp4 (e2m1, a power-of-two scale per 32)"
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
        if self.kind in ("int", "mxfp4"):
            return (out_features, self.groups(in_features))
        if self.block_size is None:
            return (out_features,)
        bn, bk = self.block_size
        return (-(-out_features // bn), -(-in_features // bk))


MXFP4 = WeightFormat("mxfp4", bits=4, group_size=32)


def add_quantized_parameters(module: nn.Module, fmt: WeightFormat, out_features: int, in_features: int,
                             leading: tuple[int, ...] = ()) -> None:
    """Give ``module`` empty parameters in ``fmt``'s layout for weights [*leading, out, in]: ``qweight``,
    ``scales``, ``zeros`` (None if symmetric); ``weight``, ``weight_scale``; or ``blocks``, ``scales``."""
    scale_shape = (*leading, *fmt.scale_shape(out_features, in_features))
    if fmt.kind == "mxfp4":
        module.blocks = _frozen((*leading, out_features, in_features // fmt.group_size, 16), torch.uint8)
        module.scales = _frozen(scale_shape, torch.uint8)
    elif fmt.kind == "int":
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
    by_columns = {"qweight": True, "weight": True, "blocks": True, "scales": fmt.group_size is not None,
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
        qweight = module.qweight[index]
        group_size = fmt.group_size or qweight.shape[-1] * 32 // fmt.bits
        return dequantize_int_weight(qweight, module.scales[index], zeros, group_size, fmt.bits, dtype)
    return dequantize_fp8(module.weight[index], module.weight_scale[index], fmt.block_size, dtype)


def _frozen(shape: tuple[int, ...], dtype: torch.dtype | None = None) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
