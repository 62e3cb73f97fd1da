"""The few primitives that make a write survive a crash or power loss: fsync a file, its directory,
and replace a file atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO


def sync_file(handle: IO[bytes]) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def sync_dir(path: Path) -> None:
    """Make a create, rename or delete inside `path` durable (the entry lives in the directory)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: Path, final: Path, dir_fd: int | None = None) -> None:
    """Rename a fully written, fsynced temporary file into place, durably. With `dir_fd`, an open
    folder, both are taken as names in it: a link put in place of the folder's path cannot redirect."""
    if dir_fd is None:
        os.replace(tmp, final)
        sync_dir(final.parent)
    else:
        os.replace(tmp.name, final.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)


def write_atomic(path: Path, data: bytes) -> None:
    """After a crash `path` holds either its old content or `data`, never a mix. A link at either name
    is not followed: the rename replaces a link at `path`, and one at the temporary name is refused (ELOOP)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "wb") as handle:
        handle.write(data)
        sync_file(handle)
    publish(tmp, path)
