"""The exception for a mistake the user can fix; the CLI turns it into one line and exit status 2."""

from __future__ import annotations


class UsageError(Exception):
    """A mistake the user can fix (a missing file or column, a bad setting, a busy output directory).

    The message is a complete sentence naming the problem; callers print it as is, with no traceback.
    """
