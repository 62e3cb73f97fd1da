"""Linear layers: a plain one that runs on oneDNN on the CPU, and its tensor-parallel splits.

PyTorch sends fp32 CPU matmuls to MKL, which on some x86 CPUs (AMD EPYC here) is 1.2x slower
than oneDNN for prefill-sized batches and 2.5x slower for decode-sized ones (a few to a few
dozen rows). Results agree to float rounding; on GPUs and where oneDNN is missing, plain
F.linear runs.

A parameter's ``tp_dim`` tells the loader along which dimension of the checkpoint tensor it
holds this rank's slice (None: the whole tensor).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.layers.parallel import TensorParallel

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _ONEDNN and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 2:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


class ColumnParallelLinear(Linear):
    """This rank's `out_features / K` output rows; its output stays split across ranks."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, what: str, bias: bool = False):
        super().__init__(in_features, tp.split(out_features, what), bias=bias)
        for param in self.parameters():
            param.tp_dim = 0


class RowParallelLinear(Linear):
    """This rank's `in_features / K` input columns; partial outputs are summed across ranks.
    No bias: none of the models' row-parallel projections has one."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, what: str):
        super().__init__(tp.split(in_features, what), out_features, bias=False)
        self.weight.tp_dim = 1
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_reduce(super().forward(x))
