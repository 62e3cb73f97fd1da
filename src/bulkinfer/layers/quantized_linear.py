"""A linear layer whose weight stays quantized in memory (layouts in layers/quantized_weights.py).

On a GPU the quantized GEMM kernels read the packed weight directly: FP8 with activations
quantized per token inside the kernel, integers dequantized inside the kernel. On the CPU small
half-precision batches of integer weights go to torch's packed kernels (layers/quantized_cpu.py);
everything else, and deterministic mode everywhere, dequantizes the weight into the compute
dtype for each call and multiplies as a plain layer does, so only one layer's plain weight
exists at a time.
"""

from __future__ import annotations

import torch
from torch import nn

from bulkinfer.layers.linear import invariant_linear, linear
from bulkinfer.layers.quantized_cpu import packed_kernel_runs, packed_matmul
from bulkinfer.layers.parallel import SINGLE, TensorParallel
from bulkinfer.layers.quantized_weights import WeightFormat, add_quantized_parameters, dequantize, split_dims


class QuantizedLinear(nn.Module):
    """``y = x @ W.T (+ bias)`` with W held in ``fmt``'s layout; parameters named as the loader fills them."""

    batch_invariant = False  # set by set_batch_invariant

    def __init__(self, in_features: int, out_features: int, fmt: WeightFormat, bias: bool,
                 split: int | None = None, tp: TensorParallel = SINGLE):
        """``in_features`` and ``out_features``: this rank's. ``split``: what ranks split, as the plain layer
        this replaces: None (nothing), 0 (its outputs, column-parallel) or 1 (its inputs, row-parallel:
        partial outputs summed across ``tp``'s ranks)."""
        super().__init__()
        if split == 1 and fmt.act_order and tp.size > 1:
            raise ValueError("act-order weights cannot split their inputs over ranks (the order spans all of them)")
        self.in_features, self.out_features, self.format = in_features, out_features, fmt
        add_quantized_parameters(self, fmt, out_features, in_features)
        self.perm = nn.Parameter(torch.empty(in_features, dtype=torch.int64), requires_grad=False) \
            if fmt.act_order else None
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None
        split_dims(self, fmt, split)
        self.tp = tp if split == 1 else SINGLE  # only a row-parallel layer sums across ranks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [T, in] -> [T, out]
        if self.perm is not None:
            flat = flat[:, self.perm]
        out = self.tp.all_reduce(self._matmul(flat))
        return out.view(*x.shape[:-1], out.shape[-1])

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        fmt = self.format
        if self.batch_invariant:
            return invariant_linear(x, self.dequantized(x.dtype), self.bias)
        if x.device.type == "cuda":
            out = self._gpu_matmul(x)
        elif fmt.kind == "int" and packed_kernel_runs(x, fmt):
            out = packed_matmul(x, self.qweight, self.scales, self.zeros, fmt)
        else:
            return linear(x, self.dequantized(x.dtype), self.bias)
        return out if self.bias is None else out + self.bias

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """The plain weight [out, in] (input columns in ``perm``'s order when there is one)."""
        return dequantize(self, self.format, dtype)

    def _gpu_matmul(self, x: torch.Tensor) -> torch.Tensor:
        fmt = self.format
        if fmt.kind == "int":
            from bulkinfer.kernels.int_weight_gemm import int_weight_gemm

            return int_weight_gemm(x, self.qweight, self.scales, self.zeros, fmt.group_size or self.in_features,
                                   fmt.bits)
        from bulkinfer.kernels.fp8_gemm import fp8_gemm

        return fp8_gemm(x, self.weight, self.weight_scale, fmt.block_size)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.format.describe()}"

