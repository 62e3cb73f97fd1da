"""Linear layers: a plain one that runs on oneDNN on the CPU, and its tensor-parallel splits.

PyTorch sends fp32 CPU matmuls to MKL, which on some x86 CPUs (AMD EPYC here) is 1.2x slower
than oneDNN for prefill-sized batches and 2.5x slower for decode-sized ones (a few to a few
dozen rows). Results agree to float rounding; on GPUs and where oneDNN is missing, plain
F.linear runs.

oneDNN compiles and keeps a kernel for every input shape it meets (about 0.6 MB each, in two
caches of 1,024 entries). A prefill step's token count rarely repeats, so a job grew by about 1 MB
per step until the caches were full (1-2 GB). Row counts above 8 are therefore padded up to one of
8 sizes per power of two (at most 12.5% padding): a step budget of 2,048 tokens meets at most 72
shapes per weight. Sending only small inputs to oneDNN instead cost about 20% of the throughput
of benchmark (a) in one run: its decode steps run 100-250 rows.

A bf16 weight is multiplied in oneDNN's blocked layout (pairs of input features interleaved for the
CPU's bf16 dot-product instructions), into which oneDNN reorders a plain weight on every call: for
a decode step's 64 rows that reorder made a matmul 1.6x slower (512x1,024 and 512x2,816 weights,
one core). ``pack_linear_weights`` reorders each one once, after loading, in place of the plain
weight. fp32 weights stay plain: they run in their plain layout, and their results stay exactly
as they were.

A parameter's ``tp_dim`` tells the loader along which dimension of the checkpoint tensor it
holds this rank's slice (None: the whole tensor).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.layers.parallel import TensorParallel

_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear``, through oneDNN where that is faster."""
    if runs_on_onednn(x):
        return onednn_linear(x, weight, bias)
    return F.linear(x, weight, bias)


def runs_on_onednn(x: torch.Tensor) -> bool:
    """Whether ``linear`` sends this input to oneDNN."""
    return _ONEDNN and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and x.dim() == 2


INVARIANT_ROWS = 32  # the CPU's batch-invariant matmuls multiply row tiles of exactly this many


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``linear`` with one tiling for every row count, so a row's result does not depend on the others.

    On a GPU, the Triton matmul with fixed tiles. On the CPU, oneDNN and MKL choose their blocking
    by the row count, so rows go in tiles of exactly INVARIANT_ROWS (the last one padded): the
    same kernel for every tile, whichever rows share it.
    """
    if x.device.type == "cuda":
        from bulkinfer.kernels.matmul import matmul_triton

        return matmul_triton(x, weight, bias)
    rows = x.shape[0]
    padded = F.pad(x, (0, 0, 0, -rows % INVARIANT_ROWS))
    tiles = [linear(tile, weight, bias) for tile in padded.split(INVARIANT_ROWS)]
    return torch.cat(tiles)[:rows] if tiles else x.new_empty(0, weight.shape[0])


class Linear(nn.Linear):
    batch_invariant = False  # set on the instances of a deterministic engine (set_batch_invariant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._project(x, self.bias)

    def _project(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # transformers' model code passes [batch, tokens, features]
        out = (invariant_linear if self.batch_invariant else linear)(flat, self.weight, bias)
        return out.view(*x.shape[:-1], out.shape[-1])


def set_batch_invariant(model: nn.Module) -> None:
    """Every linear layer of ``model`` through :func:`invariant_linear`, and every other module that
    declares a ``batch_invariant`` switch (the mixture-of-experts MLP) switched on."""
    for module in model.modules():
        if hasattr(module, "batch_invariant"):
            module.batch_invariant = True


def pack_linear_weights(model: nn.Module) -> int:
    """Each CPU bf16 weight of ``model``'s linear layers in oneDNN's layout, replacing the plain one
    (the memory stays the same); returns how many were packed. A weight another module shares (an LM
    head tied to the embedding, which looks rows up) stays plain, as does one whose module reads it as a
    tensor (``plain_weight``: latent attention's kv_b_proj)."""
    uses: dict[int, int] = {}
    for _, param in model.named_parameters(remove_duplicate=False):
        uses[id(param)] = uses.get(id(param), 0) + 1
    count = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (isinstance(module, Linear) and _packable(weight) and uses[id(weight)] == 1
                and not getattr(module, "plain_weight", False)):
            module.weight = nn.Parameter(packed(weight), requires_grad=False)
            count += 1
    return count


def packed(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` as the engine holds it: in oneDNN's layout if it is a CPU bf16 matrix, else as it is."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None) if _packable(weight) else weight


def _packable(weight: torch.Tensor | None) -> bool:
    return (_ONEDNN and isinstance(weight, torch.Tensor) and weight.device.type == "cpu"
            and weight.dtype == torch.bfloat16 and weight.layout == torch.strided and weight.dim() == 2)


def onednn_rows(rows: int) -> int:
    """``rows`` rounded up to one of 8 sizes per power of two (exact up to 8)."""
    step = 1 << max(0, rows.bit_length() - 4)
    return -(-rows // step) * step


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` on oneDNN for a 2-D CPU ``x``; ``weight`` plain, or already in oneDNN's layout
    (``torch.ops.mkldnn._reorder_linear_weight``)."""
    rows = x.shape[0]
    padded = onednn_rows(rows)
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
    """This rank's `in_features / K` input columns; partial outputs are summed across ranks. A bias
    (gpt-oss's output projection) is whole on every rank and added once, after the sum."""

    def __init__(self, in_features: int, out_features: int, tp: TensorParallel, what: str, bias: bool = False):
        super().__init__(tp.split(in_features, what), out_features, bias=bias)
        self.weight.tp_dim = 1
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return super().forward(x)
        out = self.tp.all_reduce(self._project(x, None))
        return out if self.bias is None else out + self.bias
