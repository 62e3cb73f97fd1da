"""One run per output directory.

The lock is an flock on OUT/.lock, which the kernel drops when its holder dies however it dies, so a
lock left by a killed run is stale by construction and simply taken over. The file also records the
holder's pid and hostname, to name it in the refusal; where the filesystem has no flock, that record
is the lock, and a holder on this host whose pid no longer runs is taken over.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bulkinfer.errors import UsageError
from bulkinfer.runner.outdir.no_links import open_no_follow, read_no_follow


@dataclass(frozen=True)
class Holder:
    pid: int
    hostname: str
    started: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.hostname}, started {self.started}"

    def may_be_alive(self) -> bool:
        """False only when the pid surely no longer runs (we cannot look at another host's processes)."""
        if self.hostname != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, under another user
            return True
        return True


class JobLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Raises UsageError naming the holder when another live run has the directory."""
        try:
            fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)
        except PermissionError:
            raise UsageError(f"{self.path.parent}: the output directory cannot be written (permission denied); "
                             f"choose another --output") from None
        try:
            if not _try_flock(fd, self.path):
                raise UsageError(_busy_message(self.path, read_holder(self.path)))
        except BaseException:
            os.close(fd)
            raise
        record = json.dumps(asdict(Holder(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S"))))
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def held(self) -> bool:
        """Whether the file at our path is still the one we locked (not deleted, not replaced)."""
        try:
            return self._fd is not None and os.lstat(self.path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        # The file stays: unlinking it would let a run that opened it a moment ago lock a dead inode.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def current_holder(path: Path) -> Holder | None:
    """Who holds the lock now, without taking it (except for the instant the test needs)."""
    try:
        fd = open_no_follow(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        return None if _try_flock(fd, path) else read_holder(path)
    finally:
        os.close(fd)  # closing drops a lock we may have taken to test


def read_holder(path: Path) -> Holder | None:
    try:
        with read_no_follow(path) as handle:
            return Holder(**json.loads(handle.read()))
    except (OSError, ValueError, TypeError):
        return None


def _try_flock(fd: int, path: Path) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    holder = read_holder(path)  # no flock on this filesystem: the recorded pid decides
    return holder is None or not holder.may_be_alive()


def _busy_message(path: Path, holder: Holder | None) -> str:
    # Never advise deleting the lock: the kernel drops it whenever its holder dies, so a lock that is
    # held means a live process holds it.
    who = holder.describe() if holder else "another process"
    return f"{path.parent} is in use by another bulkinfer run ({who}); wait for it to finish or stop it"
