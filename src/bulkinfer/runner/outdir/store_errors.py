"""A store that fails (unreachable, refusing, timing out) stops a job with one line, never a traceback.

The store's libraries raise their own errors (botocore's for S3 next to fsspec's OSErrors); every one
of them becomes a RunError naming the place, since what is committed is in the store's ledger and a
rerun resumes from there.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from bulkinfer.errors import RunError


def _store_errors() -> tuple[type[BaseException], ...]:
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:
        return (OSError,)
    return (OSError, BotoCoreError)


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """Turn a failure of the store at `url` into one RunError line."""
    try:
        yield
    except _store_errors() as exc:
        raise RunError(f"{url}: the object store failed ({str(exc).strip() or type(exc).__name__}); nothing "
                       f"committed is lost; rerun when the store is reachable") from None
