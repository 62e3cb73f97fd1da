"""A quantized checkpoint's tensors, streamed as the canonical ones the quantized layers hold.

Which layers are quantized is read from the checkpoint's own tensor names (a layer with the
format's marker tensor is; any other, such as an ignored ``lm_head``, is plain), so config
lists of ignored modules need no interpreting. A layer's tensors are held back until all of
them have been read, then repacked together.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open

from bulkinfer.models.checkpoint import safetensors_files
from bulkinfer.models.quantization.layout import CheckpointLayout

NamedTensors = Iterable[tuple[str, torch.Tensor]]


def quantized_layers(path: Path, layout: CheckpointLayout) -> dict[str, frozenset[str]]:
    """Each quantized layer's name in the checkpoint -> the suffixes of its tensors (its bias aside),
    read from the safetensors headers alone."""
    suffixes: dict[str, set[str]] = {}
    for file in safetensors_files(path):
        with safe_open(str(path / file), framework="pt") as handle:
            for name in handle.keys():
                prefix, _, suffix = name.rpartition(".")
                suffixes.setdefault(prefix, set()).add(suffix)
    return {prefix: frozenset(names - {"bias"}) for prefix, names in suffixes.items() if layout.marker in names}


def canonical_tensors(tensors: NamedTensors, layers: dict[str, frozenset[str]],
                      layout: CheckpointLayout) -> Iterator[tuple[str, torch.Tensor]]:
    """``tensors`` with each quantized layer's tensors replaced by its canonical ones, named after the layer."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors:
        prefix, _, suffix = name.rpartition(".")
        if suffix not in layers.get(prefix, ()):
            yield name, tensor
            continue
        parts = pending.setdefault(prefix, {})
        parts[suffix] = tensor
        if len(parts) == len(layers[prefix]):
            del pending[prefix]
            for canonical, value in _to_canonical(prefix, parts, layout).items():
                yield f"{prefix}.{canonical}", value


def _to_canonical(prefix: str, parts: dict[str, torch.Tensor], layout: CheckpointLayout) -> dict[str, torch.Tensor]:
    try:
        return layout.to_canonical(parts)
    except KeyError as exc:
        raise ValueError(f"checkpoint layer {prefix} lacks its {exc.args[0]} tensor") from None
    except ValueError as exc:
        raise ValueError(f"checkpoint layer {prefix}: {exc}") from None
