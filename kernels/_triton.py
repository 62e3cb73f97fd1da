"""Triton, if it can be imported, for the kernel files beside this one.

The kernel files also hold the PyTorch references, which are the CPU execution path, so they must
import on machines without Triton (macOS, minimal CPU installs). There ``jit`` returns a stand-in
that raises a clear error when a kernel is launched, and nothing else changes.

Kernel signatures use ``from __future__ import annotations``: Triton reads ``tl.constexpr`` from
the annotation's text, so ``tl`` is never evaluated when the kernel is defined.
"""

from __future__ import annotations

from typing import Callable

try:
    import triton
    import triton.language as tl
except ImportError:  # the references must still import
    triton = None
    tl = None

HAS_TRITON = triton is not None


class _MissingTriton:
    def __init__(self, fn: Callable):
        self.__name__ = fn.__name__

    def __getitem__(self, grid):
        raise RuntimeError(f"kernel {self.__name__} needs the triton package, which could not be imported")


def jit(fn: Callable):
    """``triton.jit`` when Triton is installed, else a stand-in that fails only when launched."""
    return triton.jit(fn) if HAS_TRITON else _MissingTriton(fn)


def is_interpreted(kernel) -> bool:
    """Whether ``kernel`` was defined in Triton's interpreter (TRITON_INTERPRET=1 at import time)."""
    return type(kernel).__name__ == "InterpretedFunction"


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()
