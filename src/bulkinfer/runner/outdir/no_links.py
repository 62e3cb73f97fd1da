"""A job's output directory is bulkinfer's alone: a symbolic link in it is never followed.

A link in place of the ledger, the lock, a results folder or a result file would make a run write,
truncate or delete the file it points to, outside the directory, and make status and export read a
foreign file as a result. So a run, status and export refuse a directory whose entries are links
(`JobDir.check_entries`), and every file in it is opened with O_NOFOLLOW (`open_no_follow`), which also
refuses a link put there after the check.

The output directory itself may be a link: the user named it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

from bulkinfer.errors import UsageError


def open_no_follow(path: Path, flags: int = os.O_RDONLY, mode: int = 0o644, dir_fd: int | None = None) -> int:
    """os.open that refuses, in one line, to follow a link at the last part of `path`; with `dir_fd`,
    `path.name` is opened in that folder. Add os.O_DIRECTORY to open a folder."""
    target = path if dir_fd is None else path.name
    try:
        return os.open(target, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        # A link opened with O_DIRECTORY | O_NOFOLLOW fails with ENOTDIR, not ELOOP.
        if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(target, dir_fd)):
            raise UsageError(link_refusal(path)) from None
        raise


def read_no_follow(path: Path, dir_fd: int | None = None) -> IO[bytes]:
    """`path` open for reading in binary, refused if it is a link. O_NONBLOCK: a FIFO put in a file's
    place must not hang the open (it changes nothing for a regular file)."""
    return os.fdopen(open_no_follow(path, os.O_RDONLY | os.O_NONBLOCK, dir_fd=dir_fd), "rb")


def link_refusal(path: Path) -> str:
    return (f"{path}: is a symbolic link; bulkinfer never follows a link inside an output directory (a run would "
            f"write or delete the file it points to); remove the link, or choose another --output")


def _is_link(path: Path | str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode)
    except OSError:
        return False
