"""The exceptions the command line turns into one line, with no traceback.

UsageError is a mistake the user can fix in their command or files (exit status 2); RunError is a
job that cannot go on because of the machine or of what happened to its output directory (exit 1).
"""

from __future__ import annotations

import errno


class UsageError(Exception):
    """A mistake the user can fix (a missing file or column, a bad setting, a busy output directory).

    The message is a complete sentence naming the problem; callers print it as is, with no traceback.
    """


class RunError(Exception):
    """The job stopped for a reason outside the user's command: a full disk, an I/O error, a lost
    lock. Nothing committed is lost; the message says what to do before running it again."""


def disk_error(exc: OSError, what: str) -> RunError:
    """A RunError for a failed write of `what`, saying what happened and what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        reason, remedy = "disk full" if exc.errno == errno.ENOSPC else "disk quota exceeded", "free space"
    else:
        reason, remedy = exc.strerror or str(exc), "check the disk"
    return RunError(f"{reason} writing {what}: nothing committed is lost; {remedy} and rerun")
