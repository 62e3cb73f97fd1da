"""The CPU engine keeps freed activation memory mapped, so steps stop paying page faults for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

_FAULTS = """
import resource, sys, torch
from bulkinfer.engine.cpu_memory import _M_MMAP_THRESHOLD, keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
else:  # glibc's starting 128 KiB threshold, which its heuristics move over a process's life: pinned
    import ctypes
    assert ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, 128 << 10) == 1
def step():  # a forward pass's activations: several 16 MiB blocks alive at once, then all freed
    return [torch.empty(4 << 20).fill_(1.0) for _ in range(4)]
for _ in range(3):  # the first steps' pages come from the kernel either way, until the heap has settled
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str) -> int:
    result = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tunes glibc's malloc")
def test_freed_pages_are_reused_instead_of_faulted_in_again():
    pages_per_step = 4 * (16 << 20) // 4096
    assert _page_faults("handed back") > 5 * pages_per_step  # freed pages go back to the kernel and fault in again
    assert _page_faults("tuned") < pages_per_step  # less than one step in all: the pages are reused
