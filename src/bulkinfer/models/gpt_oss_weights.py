"""gpt-oss's checkpoint tensors, renamed and reshaped into the per-expert tensors the loader places.

gpt-oss stores each layer's experts stacked and transposed: ``experts.gate_up_proj`` [E, hidden, 2 * inter]
with the gate and up columns interleaved (gate at even indices), ``experts.down_proj`` [E, inter, hidden],
and their biases ``gate_up_proj_bias`` [E, 2 * inter] (interleaved too) and ``down_proj_bias`` [E, hidden].
Its released checkpoints store the two weights in MXFP4 instead (``*_blocks`` and ``*_scales``,
kernels/mxfp4.py), [E, out, in] in 4-bit values: they are dequantized here, so a model holds its experts in
its compute dtype (docs/models.md gives the memory this costs). Its router is ``mlp.router``, ours ``mlp.gate``.

Every expert's tensors come out under the names Mixtral-style checkpoints use (``experts.{e}.gate_proj.weight``
[inter, hidden] ...), so the loader's own rules put each into its slot of our stacked experts, and split it
over tensor-parallel ranks as any expert's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch

from bulkinfer.kernels.mxfp4 import dequantize_mxfp4

_STACKED = re.compile(r"(.*\.experts)\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?$")


def gpt_oss_tensors(tensors: Iterator[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's (name, tensor) pairs as the loader's per-expert ones; other tensors pass, renamed."""
    pending: dict[str, torch.Tensor] = {}  # an MXFP4 weight's blocks or scales, until its other half comes
    for name, tensor in tensors:
        match = _STACKED.match(name)
        if match is None:
            yield name.replace(".mlp.router.", ".mlp.gate."), tensor
            continue
        experts, proj, suffix = match.groups()
        if suffix in ("_blocks", "_scales"):
            pending[name] = tensor
            blocks, scales = pending.get(f"{experts}.{proj}_blocks"), pending.get(f"{experts}.{proj}_scales")
            if blocks is None or scales is None:
                continue
            del pending[f"{experts}.{proj}_blocks"], pending[f"{experts}.{proj}_scales"]
            # Expert by expert, [out, in] -> the plain checkpoints' [in, out]: one expert's fp32 copy at a time.
            tensor = (dequantize_mxfp4(b, s, torch.float32).T for b, s in zip(blocks, scales))
            suffix = None
        yield from _per_expert(experts, proj, suffix == "_bias", tensor)
    if pending:
        raise ValueError(f"checkpoint tensor {next(iter(pending))} has no MXFP4 partner (blocks with scales)")


def _per_expert(experts: str, proj: str, bias: bool,
                tensor: Iterable[torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """``tensor``: the stacked tensor, or its experts one by one."""
    kind = "bias" if bias else "weight"
    for e, one in enumerate(tensor):
        if proj == "down_proj":  # weight [inter, hidden] -> [hidden, inter]; bias [hidden]
            yield f"{experts}.{e}.down_proj.{kind}", one if bias else one.T
        else:  # gate and up interleaved along the last dimension
            yield f"{experts}.{e}.gate_proj.{kind}", one[..., 0::2] if bias else one[:, 0::2].T
            yield f"{experts}.{e}.up_proj.{kind}", one[..., 1::2] if bias else one[:, 1::2].T
