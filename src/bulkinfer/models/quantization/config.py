"""config.json's ``quantization_config``: which on-disk layout the checkpoint's quantized layers use.

Read with the rest of the config, before any weight loads, so a format bulkinfer does not run is
refused in one line that names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bulkinfer.models.quantization.awq import awq_layout
from bulkinfer.models.quantization.compressed_tensors import compressed_tensors_layout
from bulkinfer.models.quantization.fp8_block import fp8_layout
from bulkinfer.models.quantization.gptq import gptq_layout
from bulkinfer.models.quantization.layout import CheckpointLayout
from bulkinfer.models.refusal import UnsupportedModelError

_LAYOUTS: dict[str, Callable[[dict], CheckpointLayout]] = {
    "fp8": fp8_layout,
    "compressed-tensors": compressed_tensors_layout,
    "gptq": gptq_layout,
    "awq": awq_layout,
}


@dataclass(frozen=True)
class QuantizationConfig:
    method: str  # quant_method, as config.json names it
    layout: CheckpointLayout

    def describe(self) -> str:
        return f"{self.method}: {self.layout.format.describe()}"


def quantization_from_hf(hf: dict) -> QuantizationConfig | None:
    """None for a checkpoint that is not quantized; raises UnsupportedModelError for one bulkinfer
    does not run."""
    qc = hf.get("quantization_config")
    if not qc:
        return None
    method = str(qc.get("quant_method", "(no quant_method)"))
    if method not in _LAYOUTS:
        raise UnsupportedModelError(f"quantization method {method!r} is not supported: bulkinfer runs "
                                    f"{', '.join(_LAYOUTS)} checkpoints")
    return QuantizationConfig(method, _LAYOUTS[method](qc))
