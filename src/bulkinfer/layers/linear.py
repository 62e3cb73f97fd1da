"""A linear layer that runs on oneDNN on the CPU.

PyTorch sends fp32 CPU matmuls to MKL, which on some x86 CPUs (AMD EPYC here) is 1.2x slower
than oneDNN for prefill-sized batches and 2.5x slower for decode-sized ones (a few to a few
dozen rows). Results agree to float rounding; on GPUs and where oneDNN is missing, plain
F.linear runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _ONEDNN and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 2:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)
