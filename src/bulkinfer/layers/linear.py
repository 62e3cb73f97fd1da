"""Linear layers: a plain one that runs on oneDNN on the CPU, and its tensor-parallel splits.

PyTorch sends fp32 CPU matmuls to MKL, which on some x86 CPUs (AMD EPYC here) is 1.2x slower
than oneDNN for prefill-sized batches and 2.5x slower for decode-sized ones (a few to a few
dozen rows). Results agree to float rounding; on GPUs and where oneDNN is missing, plain
F.linear runs.

oneDNN compiles and keeps a kernel for every input shape it meets (about 1 MB each, in two caches
of 1,024 entries). A prefill step's token count rarely repeats, so sending every step there grew
a job by about 1 MB per step until the caches were full (1-2 GB): only decode-sized inputs go to
oneDNN, their row count rounded up to a few sizes, and larger ones take F.linear.

A parameter's ``tp_dim`` tells the loader along which dimension of the checkpoint tensor it
holds this rank's slice (None: the whole tensor).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.layers.parallel import TensorParallel

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
ONEDNN_MAX_ROWS = 64  # decode-sized inputs, where oneDNN gains most
_ROW_STEP = 8  # above this, rows are padded to a multiple of it: at most 15 shapes per weight


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (_ONEDNN and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 2
                and x.shape[0] <= ONEDNN_MAX_ROWS):
            return _onednn_linear(x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


def _onednn_rows(rows: int) -> int:
    return rows if rows <= _ROW_STEP else -(-rows // _ROW_STEP) * _ROW_STEP


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    rows = x.shape[0]
    padded = _onednn_rows(rows)
    if padded != rows:
        x = F.pad(x, (0, 0, 0, padded - rows))
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")[:rows]


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
