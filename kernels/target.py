"""The GPU a launcher configures its kernels for, as plain numbers.

Tile sizes, warps, stages and split counts are pure functions of the shapes, the dtype and a
``KernelTarget``; the only device query is ``device_target``, once per device. So the compile
check can ask what a launcher would pick on an sm_80 or sm_90 without one, and compile exactly that.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

_KIB = 1024


@dataclass(frozen=True)
class KernelTarget:
    name: str
    arch: int  # compute capability as major * 10 + minor; 0 for Triton's interpreter
    multiprocessors: int
    shared_memory: int  # bytes one program may use (the opt-in maximum)

    @property
    def interpreted(self) -> bool:
        return self.arch == 0

    @property
    def supports_bf16(self) -> bool:
        return self.interpreted or self.arch >= 80


INTERPRETER = KernelTarget("interpreter", 0, 1, 1 << 30)

# The GPUs the compile check builds for: an A100, an A10/RTX 30xx, an H100/H200.
KNOWN_TARGETS = {
    "sm_80": KernelTarget("sm_80", 80, 108, 163 * _KIB),
    "sm_86": KernelTarget("sm_86", 86, 84, 99 * _KIB),
    "sm_90": KernelTarget("sm_90", 90, 132, 227 * _KIB),
}
# On sm_75 (T4) Triton 3.9 compiles the attention kernels without tensor cores: every tile size
# tried spills hundreds of bytes per thread, and bf16 is missing. Such GPUs run the torch backend.
MIN_ARCH = 80


@functools.cache
def device_target(device: torch.device) -> KernelTarget:
    """The target of ``device``: its own properties on CUDA, the interpreter elsewhere."""
    if device.type != "cuda":
        return INTERPRETER
    props = torch.cuda.get_device_properties(device)
    arch = props.major * 10 + props.minor
    shared = getattr(props, "shared_memory_per_block_optin", 0) or 48 * _KIB
    return KernelTarget(f"sm_{arch}", arch, props.multi_processor_count, shared)


def check_supported(target: KernelTarget) -> None:
    """One line for a GPU the Triton kernels cannot run on."""
    if not target.interpreted and target.arch < MIN_ARCH:
        raise RuntimeError(f"the Triton kernels need a GPU of compute capability 8.0 or newer; this one is "
                           f"{target.arch // 10}.{target.arch % 10}: use attention_backend='torch'")
