"""The dtype a model computes in, and the one line that says why.

"auto" depends on the machine (a CPU with native bfloat16 runs bfloat16, one without runs float32),
so a run's summary and stats.json say which dtype ran and for what reason.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

# The dtype setting's names (config.DTYPES, kept free of torch for the CLI's start-up) as torch dtypes.
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
# x86 flags (as Linux names them) of bfloat16 matrix instructions that oneDNN uses: with either, a bfloat16
# matmul runs at about twice float32's rate or more; without them bfloat16 is emulated and slower than float32.
CPU_BF16_FLAGS = {"avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX"}


@dataclass(frozen=True)
class ComputeDtype:
    dtype: torch.dtype
    reason: str  # e.g. "auto: this CPU has AVX512-BF16 and AMX"

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def describe(self) -> str:
        """One line for a run's summary: "bfloat16 (auto: this CPU has AVX512-BF16 and AMX)"."""
        return f"{self.name} ({self.reason})"


def choose_dtype(asked: str, checkpoint: torch.dtype, device: torch.device,
                 cpu_flags: frozenset[str] = frozenset()) -> ComputeDtype:
    """`asked` is the dtype setting; `cpu_flags` this CPU's feature flags (see `cpu_flags`), read for "auto"
    on the CPU. On a GPU "auto" is the checkpoint's half type, bfloat16 for a float32 checkpoint; bfloat16
    becomes float16 on a GPU without it (before Ampere)."""
    if asked == "auto" and device.type == "cpu":
        return cpu_auto_dtype(checkpoint, cpu_flags)
    if asked != "auto":
        chosen = ComputeDtype(_DTYPES[asked], "as asked")
    elif checkpoint != torch.float32:
        chosen = ComputeDtype(checkpoint, "auto: the checkpoint's")
    else:
        chosen = ComputeDtype(torch.bfloat16, "auto: a float32 checkpoint on a GPU")
    if chosen.dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        logger.warning("this GPU has no bfloat16: running in float16")
        return ComputeDtype(torch.float16, "this GPU has no bfloat16")
    return chosen


def cpu_auto_dtype(checkpoint: torch.dtype, cpu_flags: frozenset[str]) -> ComputeDtype:
    """bfloat16 where the CPU multiplies it natively and the checkpoint is bfloat16 or float32, else float32.

    A float16 checkpoint runs in float32: widening float16 is exact, while bfloat16 would drop three bits
    of every weight's mantissa, and CPUs without AVX512-FP16 emulate float16 arithmetic.
    """
    native = [name for flag, name in CPU_BF16_FLAGS.items() if flag in cpu_flags]
    if not native:
        return ComputeDtype(torch.float32, "auto: this CPU has no native bfloat16 (AVX512-BF16 or AMX)")
    if checkpoint == torch.float16:
        return ComputeDtype(torch.float32, "auto: a float16 checkpoint, widened exactly rather than rounded "
                                           "to bfloat16")
    return ComputeDtype(torch.bfloat16, f"auto: this CPU has {' and '.join(native)}")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as Linux lists them in /proc/cpuinfo; none elsewhere, so "auto" stays float32."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return frozenset()
    for line in lines:
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()
