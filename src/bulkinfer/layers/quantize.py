"""Swap a built model's plain layers for quantized ones of the same shape, before its weights load."""

from __future__ import annotations

from torch import nn

from bulkinfer.layers.moe import FusedExperts
from bulkinfer.layers.parallel import SINGLE
from bulkinfer.layers.quantized_linear import QuantizedLinear
from bulkinfer.layers.quantized_moe import QuantizedExperts
from bulkinfer.layers.quantized_weights import WeightFormat
from bulkinfer.layers.vocab_parallel import ParallelLMHead


def quantize_layers(model: nn.Module, formats: dict[str, WeightFormat]) -> None:
    """Replace each linear layer or stack of experts named in ``formats`` (a module name of ``model``) by its
    quantized kind in that format, with empty parameters for the loader to fill."""
    for name, fmt in formats.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, _quantized(getattr(parent, child), fmt))


def _quantized(plain: nn.Module, fmt: WeightFormat) -> nn.Module:
    """The same shapes (this rank's) and the same split over ranks as ``plain``."""
    if isinstance(plain, FusedExperts):
        return QuantizedExperts(plain, fmt)
    tp = getattr(plain, "tp", SINGLE)
    if isinstance(plain, ParallelLMHead) and tp.size > 1:
        raise ValueError("a quantized lm_head cannot be split over ranks (its vocabulary slices are gathered)")
    return QuantizedLinear(plain.in_features, plain.out_features, fmt, plain.bias is not None,
                           split=getattr(plain.weight, "tp_dim", None), tp=tp)
