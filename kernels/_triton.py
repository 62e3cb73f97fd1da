"""Triton, if it can be imported, for the kernel files beside this one.

The kernel files also hold the PyTorch references, which are the CPU execution path, so they must
import on machines without Triton (macOS, minimal CPU installs). There ``jit`` returns a stand-in
that raises a clear error when a kernel is launched, and nothing else changes.

Kernel signatures use ``from __future__ import annotations``: Triton reads ``tl.constexpr`` from
the annotation's text, so ``tl`` is never evaluated when the kernel is defined.

Launchers build ``Launch`` records (kernel, grid, arguments) with no device in sight, then run
them: the compile check (bulkinfer.bench.compile_check) builds the same records from CPU tensors
and compiles them for named GPUs, so it checks exactly what a GPU would run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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


def jit(fn: Callable | None = None, *, do_not_specialize: tuple[str, ...] = ()):
    """``triton.jit`` when Triton is installed, else a stand-in that fails only when launched.

    ``do_not_specialize`` names integer arguments whose values change from step to step (sequence
    counts, table widths): Triton would otherwise compile a variant when one is 1 or a multiple of 16.
    """
    def wrap(fn: Callable):
        return triton.jit(fn, do_not_specialize=list(do_not_specialize)) if HAS_TRITON else _MissingTriton(fn)
    return wrap(fn) if fn is not None else wrap


def is_interpreted(kernel) -> bool:
    """Whether ``kernel`` was defined in Triton's interpreter (TRITON_INTERPRET=1 at import time)."""
    return type(kernel).__name__ == "InterpretedFunction"


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class Launch:
    """One kernel launch, decided but not run: what the compile check compiles and a GPU runs."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
    options: dict = field(default_factory=dict)  # constexprs, num_warps, num_stages

    def __call__(self) -> None:
        self.kernel[self.grid](*self.args, **self.options)


def run_all(launches: list[Launch]) -> None:
    for launch in launches:
        launch()
