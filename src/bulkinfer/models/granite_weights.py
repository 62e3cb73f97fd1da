"""Granite 4.0-H's checkpoint tensors, renamed into the per-expert and per-projection tensors the loader places.

Granite stores each layer's experts stacked: ``block_sparse_moe.input_linear.weight`` [E, 2 * inter, hidden]
(gate rows, then up rows), ``block_sparse_moe.output_linear.weight`` [E, hidden, inter], and its router as
``block_sparse_moe.router.layer.weight``. The shared MLP beside them, ``shared_mlp.input_linear`` and
``output_linear``, is our MoE block's ``shared_expert``, or the layer's whole MLP when the model has no
experts. The Mamba2 layers are ``mamba.*``, our decoder layer's ``linear_attn``.

Every tensor comes out under the names Qwen-style checkpoints use (``experts.{e}.gate_proj.weight`` ...,
``gate_proj``/``up_proj``/``down_proj``), so the loader's own rules fuse and stack them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import torch

from bulkinfer.models.config import ModelConfig

_LAYER = re.compile(r"(.*\.layers\.(\d+))\.(.*)$")
_MAMBA = re.compile(r"^mamba\.")


def granite_tensors(tensors: Iterator[tuple[str, torch.Tensor]],
                    config: ModelConfig) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's (name, tensor) pairs as the loader's; tensors outside the decoder layers pass as they are."""
    for name, tensor in tensors:
        match = _LAYER.match(name)
        if match is None:
            yield name, tensor
            continue
        layer, index, rest = match.groups()
        shared = f"{layer}.mlp.shared_expert" if config.is_sparse(int(index)) else f"{layer}.mlp"
        if rest == "block_sparse_moe.input_linear.weight":
            for e, expert in enumerate(tensor):
                gate, up = expert.chunk(2)
                yield f"{layer}.mlp.experts.{e}.gate_proj.weight", gate
                yield f"{layer}.mlp.experts.{e}.up_proj.weight", up
        elif rest == "block_sparse_moe.output_linear.weight":
            for e, expert in enumerate(tensor):
                yield f"{layer}.mlp.experts.{e}.down_proj.weight", expert
        elif rest == "block_sparse_moe.router.layer.weight":
            yield f"{layer}.mlp.gate.weight", tensor
        elif rest == "shared_mlp.input_linear.weight":
            gate, up = tensor.chunk(2)
            yield f"{shared}.gate_proj.weight", gate
            yield f"{shared}.up_proj.weight", up
        elif rest == "shared_mlp.output_linear.weight":
            yield f"{shared}.down_proj.weight", tensor
        else:
            yield f"{layer}.{_MAMBA.sub('linear_attn.', rest)}", tensor
