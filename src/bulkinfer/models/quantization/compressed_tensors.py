"""compressed-tensors checkpoints (``quant_method: compressed-tensors``, as llm-compressor writes them):

- ``float-quantized``: float8_e4m3fn ``weight`` with ``weight_scale`` per tensor [1], per output
  row [N, 1] or per block; activations quantized per token when the layer runs;
- ``pack-quantized``: 4- or 8-bit integers, weight-only, in ``weight_packed`` (the canonical packing,
  values offset by 2 ** (bits - 1)); ``weight_scale`` [N, G]; ``weight_zero_point`` packed along
  the output dimension when asymmetric; ``weight_g_idx`` with group act-order;
- ``naive-quantized``: the same integers unpacked, one int8 each, offset by nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.kernels.int_weight_gemm import unpack_int_weight
from bulkinfer.layers.quantized_weights import INT_BITS, WeightFormat
from bulkinfer.models.quantization.layout import int_canonical
from bulkinfer.models.refusal import UnsupportedModelError

FORMATS = ("float-quantized", "pack-quantized", "naive-quantized")


@dataclass(frozen=True)
class FloatQuantizedLayout:
    format: WeightFormat
    marker: str = "weight_scale"

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        weight, scale = tensors["weight"], tensors["weight_scale"].float()
        if self.format.block_size is None:  # per tensor or per row -> one scale per row
            scale = scale.reshape(-1).expand(weight.shape[0]).contiguous() if scale.numel() == 1 else scale.reshape(-1)
        return {"weight": weight, "weight_scale": scale}


@dataclass(frozen=True)
class PackQuantizedLayout:
    format: WeightFormat
    marker: str = "weight_packed"

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        bits = self.format.bits
        q = unpack_int_weight(tensors["weight_packed"], bits)[:, :int(tensors["weight_shape"][1])]
        zeros = tensors.get("weight_zero_point")
        if zeros is not None:  # packed along the output rows
            zeros = unpack_int_weight(zeros.t(), bits).t()[:q.shape[0]]
        return int_canonical(q, tensors["weight_scale"], zeros, tensors.get("weight_g_idx"), self.format)


@dataclass(frozen=True)
class NaiveQuantizedLayout:
    format: WeightFormat
    marker: str = "weight_scale"

    def to_canonical(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        offset = 2 ** (self.format.bits - 1)
        q = tensors["weight"].to(torch.int32) + offset
        zeros = tensors.get("weight_zero_point")
        zeros = None if zeros is None else zeros.to(torch.int32).reshape(q.shape[0], -1) + offset
        return int_canonical(q, tensors["weight_scale"].reshape(q.shape[0], -1), zeros,
                             tensors.get("weight_g_idx"), self.format)


def compressed_tensors_layout(qc: dict):
    """The one scheme of the checkpoint's quantized layers; refused unless bulkinfer runs it."""
    schemes = [group for group in (qc.get("config_groups") or {}).values()]
    if not schemes or any(_scheme_key(s, qc) != _scheme_key(schemes[0], qc) for s in schemes):
        raise UnsupportedModelError("compressed-tensors with no config group, or several different schemes: "
                                    "bulkinfer runs checkpoints whose quantized layers share one scheme")
    scheme = schemes[0]
    fmt_name = scheme.get("format") or qc.get("format")
    weights, inputs = scheme.get("weights") or {}, scheme.get("input_activations")
    if fmt_name not in FORMATS:
        raise UnsupportedModelError(f"compressed-tensors format {fmt_name!r}: bulkinfer runs {', '.join(FORMATS)}")
    if fmt_name == "float-quantized":
        return FloatQuantizedLayout(_float_format(weights, inputs))
    if inputs is not None:
        raise UnsupportedModelError(f"compressed-tensors {fmt_name} with quantized activations (W{weights.get('num_bits')}"
                                    f"A{inputs.get('num_bits')}): bulkinfer runs integer weights weight-only")
    fmt = _int_format(weights)
    return PackQuantizedLayout(fmt) if fmt_name == "pack-quantized" else NaiveQuantizedLayout(fmt)


def _scheme_key(scheme: dict, qc: dict) -> tuple:
    return (scheme.get("format") or qc.get("format"), repr(scheme.get("weights")), repr(scheme.get("input_activations")))


def _float_format(weights: dict, inputs: dict | None) -> WeightFormat:
    strategy = weights.get("strategy")
    if weights.get("type") != "float" or weights.get("num_bits") != 8 or strategy not in ("tensor", "channel", "block"):
        raise UnsupportedModelError(f"compressed-tensors float-quantized weights {_describe(weights)}: bulkinfer runs "
                                    "fp8 weights with per-tensor, per-channel or block scales")
    if inputs is not None and not (inputs.get("dynamic") is True and inputs.get("type") == "float"
                                   and inputs.get("strategy") in ("token", "group")):
        raise UnsupportedModelError(f"compressed-tensors fp8 with activations {_describe(inputs)}: bulkinfer "
                                    "quantizes activations dynamically, per token, and reads no static scales")
    block = weights.get("block_structure") if strategy == "block" else None
    return WeightFormat("fp8", block_size=tuple(block) if block else None)


def _int_format(weights: dict) -> WeightFormat:
    bits, strategy = weights.get("num_bits"), weights.get("strategy")
    if weights.get("type") != "int" or bits not in INT_BITS or strategy not in ("channel", "group"):
        raise UnsupportedModelError(f"compressed-tensors integer weights {_describe(weights)}: bulkinfer runs "
                                    "4- and 8-bit integer weights with per-channel or group scales")
    group = weights.get("group_size") if strategy == "group" else None
    return WeightFormat("int", bits, group, bool(weights.get("symmetric", True)), weights.get("actorder") == "group")


def _describe(args: dict) -> str:
    keys = ("type", "num_bits", "strategy", "group_size", "dynamic")
    return "(" + ", ".join(f"{key}={args.get(key)}" for key in keys if args.get(key) is not None) + ")"
