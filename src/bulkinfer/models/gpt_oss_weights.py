"""gpt-oss's checkpoint tensors, renamed and reshaped into the per-expert tensors the loader places.

gpt-oss stores each layer's experts stacked and transposed: ``experts.gate_up_proj`` [E, hidden, 2 * inter]
with the gate and up columns interleaved (gate at even indices), ``experts.down_proj`` [E, inter, hidden],
and their biases ``gate_up_proj_bias`` [E, 2 * inter] (interleaved too) and ``down_proj_bias`` [E, hidden].
Its released checkpoints store the two weights in MXFP4 instead (``*_blocks`` and ``*_scales``,
kernels/mxfp4.py), [E, out, in] in 4-bit values. The model keeps them so (layers/quantized_moe.py), or, where
tensor parallelism would split their groups of 32, they are dequantized here into its compute dtype.
Its router is ``mlp.router``, ours ``mlp.gate``.

Every expert's tensors come out under the names Mixtral-style checkpoints use (``experts.{e}.gate_proj.weight``
[inter, hidden], ``experts.{e}.gate_proj.blocks`` ...), so the loader's own rules put each into its slot of our
stacked experts, and split it over tensor-parallel ranks as any expert's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch

from bulkinfer.kernels.mxfp4 import dequantize_mxfp4

_STACKED = re.compile(r"(.*\.experts)\.(gate_up_proj|down_proj)(_bias|_blocks|_scales)?$")


def gpt_oss_tensors(tensors: Iterator[tuple[str, torch.Tensor]],
                    keep_mxfp4: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's (name, tensor) pairs as the loader's per-expert ones; other tensors pass, renamed.
    MXFP4 weights stay blocks and scales with ``keep_mxfp4``, else each becomes a plain weight."""
    pending: dict[str, torch.Tensor] = {}  # an MXFP4 weight's blocks or scales, until its other half comes
    for name, tensor in tensors:
        match = _STACKED.match(name)
        if match is None:
            yield name.replace(".mlp.router.", ".mlp.gate."), tensor
            continue
        experts, proj, suffix = match.groups()
        if suffix == "_bias":
            yield from _per_expert(experts, proj, "bias", tensor)
        elif suffix is None:  # [E, in, out] -> [E, out, in]
            yield from _per_expert(experts, proj, "weight", tensor.transpose(1, 2))
        elif keep_mxfp4:
            yield from _per_expert(experts, proj, suffix.removeprefix("_"), tensor)
        else:
            pending[name] = tensor
            blocks, scales = pending.get(f"{experts}.{proj}_blocks"), pending.get(f"{experts}.{proj}_scales")
            if blocks is None or scales is None:
                continue
            del pending[f"{experts}.{proj}_blocks"], pending[f"{experts}.{proj}_scales"]
            # Expert by expert: one expert's fp32 copy at a time.
            yield from _per_expert(experts, proj, "weight", (dequantize_mxfp4(b, s, torch.float32)
                                                             for b, s in zip(blocks, scales)))
    if pending:
        raise ValueError(f"checkpoint tensor {next(iter(pending))} has no MXFP4 partner (blocks with scales)")


def _per_expert(experts: str, proj: str, kind: str,
                tensor: Iterable[torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """``tensor``: every expert's ``kind`` (bias, weight, blocks or scales), outputs first, stacked or one by one."""
    for e, one in enumerate(tensor):
        if proj == "down_proj":
            yield f"{experts}.{e}.down_proj.{kind}", one
        else:  # gate and up interleaved along the outputs
            yield f"{experts}.{e}.gate_proj.{kind}", one[0::2]
            yield f"{experts}.{e}.up_proj.{kind}", one[1::2]
