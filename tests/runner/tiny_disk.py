"""A small tmpfs of a test's own: a disk that really fills up, so ENOSPC comes from the kernel."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """`where`/disk as a tmpfs of `size` (mount's spelling: 64k, 4m); skips the test without root."""
    mount = where / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)
