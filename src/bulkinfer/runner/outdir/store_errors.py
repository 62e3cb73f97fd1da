"""A store that fails (unreachable, refusing, timing out) stops a job with one line, never a traceback.

The store's libraries raise their own errors (botocore's for S3 next to fsspec's OSErrors); every one
of them becomes a RunError naming the place, since what is committed is in the store's ledger and a
rerun resumes from there.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.storage import storage_error


def _store_errors() -> tuple[type[BaseException], ...]:
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:
        return (OSError,)
    return (OSError, BotoCoreError)


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """Turn a failure of the store at `url` into one line: storage_error's when it knows the failure (no
    credentials, access denied: the user's to fix), else a RunError."""
    try:
        yield
    except (UsageError, RunError):
        raise
    except _store_errors() as exc:
        reason = str(exc).strip() or type(exc).__name__
        raise storage_error(exc, url) or RunError(f"{url}: the object store failed ({reason}); nothing committed is "
                                                  f"lost; rerun when the store is reachable") from None
