"""Where a job's data lives when it is not on this machine: an object store (s3://, gs://) or the Hugging
Face Hub (hf://), reached through fsspec with each ecosystem's own credentials (the AWS environment and
profiles, GOOGLE_APPLICATION_CREDENTIALS, HF_TOKEN), and the job's `storage_options` over them.

A store's failures that the user can fix (no credentials, no such bucket, access denied) are one line
and exit status 2; a store that cannot be reached is one line and exit status 1, since a rerun once it is
back goes on where the job stopped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from typing import IO, Any, Iterator

import fsspec

from bulkinfer.errors import RunError, UsageError

# The package each scheme needs, and the extra that installs it (hf://: huggingface_hub, always installed).
_PACKAGES = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}
_URL = re.compile(r"([a-z][a-z0-9+.-]*)://", re.IGNORECASE)
_LOCAL_SCHEMES = ("file", "local")
READ_BLOCK = 4 << 20  # bytes fetched per request while reading an object


def scheme_of(url: str) -> str | None:
    """The URL's scheme ("s3", "gs", "hf"), or None for a path on this machine."""
    match = _URL.match(url)
    return match.group(1).lower() if match and match.group(1).lower() not in _LOCAL_SCHEMES else None


def is_remote(url: str) -> bool:
    return scheme_of(url) is not None


def filesystem_for(url: str, storage_options: dict[str, Any] | None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that holds `url` and the path on it; a local path gives the local filesystem.
    `storage_options`: fsspec's keyword arguments for that filesystem (endpoint_url, key, secret, ...)."""
    scheme = scheme_of(url)
    if scheme in _PACKAGES:
        package, extra = _PACKAGES[scheme]
        if importlib.util.find_spec(package) is None:
            raise UsageError(f"{url}: {scheme}:// needs the {package} package; install it with "
                             f"pip install 'bulkinfer[{extra}]'")
    if scheme == "hf" and os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        from bulkinfer.runner.hub_cache import cached_filesystem

        return cached_filesystem(url)
    with store_errors(url):
        try:
            return fsspec.core.url_to_fs(url, **(storage_options or {}))
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{url}: {exc}") from None


@contextlib.contextmanager
def store_errors(url: str) -> Iterator[None]:
    """A store's failure while reaching `url`, said in one line (see the module's docstring)."""
    try:
        yield
    except (UsageError, RunError):
        raise
    except Exception as exc:
        error = storage_error(exc, url)
        if error is None:
            raise
        raise error from None


def storage_error(exc: BaseException, url: str) -> UsageError | RunError | None:
    """The one-line error for a store's failure, or None when `exc` is not one."""
    kind = type(exc).__name__
    if kind in ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError", "DefaultCredentialsError"):
        return UsageError(f"{url}: no credentials for this store ({exc}); set them as its tools take them "
                          f"(AWS_ACCESS_KEY_ID or a profile, GOOGLE_APPLICATION_CREDENTIALS, HF_TOKEN) or in "
                          f"storage_options")
    if kind in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ClientConnectorError",
                "ServerDisconnectedError", "ConnectionError", "ConnectionRefusedError", "TimeoutError"):
        return RunError(f"{url}: the store cannot be reached ({exc}); nothing committed is lost; rerun when it "
                        f"is back")
    if isinstance(exc, PermissionError):
        return UsageError(f"{url}: access denied ({exc}); check the credentials and the bucket's permissions")
    if isinstance(exc, FileNotFoundError) and "bucket" in str(exc).lower():
        return UsageError(f"{url}: no such bucket ({exc})")
    return None


def open_object(url: str, storage_options: dict[str, Any] | None) -> IO[bytes]:
    """The object at `url` as a seekable binary file that fetches it a block at a time, as it is read:
    memory holds a block or two, never the whole object."""
    fs, path = filesystem_for(url, storage_options)
    with store_errors(url):
        return fs.open(path, "rb", block_size=READ_BLOCK, cache_type="readahead")


def object_identity(url: str, storage_options: dict[str, Any] | None) -> tuple[int, str] | None:
    """The object's size and version as the store says now (not from a cached listing); None when it is
    gone. The version is what changes when the object is written again: S3's ETag, GCS's generation, the
    Hub's blob id."""
    fs, path = filesystem_for(url, storage_options)
    with store_errors(url):
        fs.invalidate_cache(path)
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return None
    for key in ("ETag", "generation", "blob_id"):
        if info.get(key) is not None:
            return int(info["size"]), str(info[key]).strip('"')
    raise RunError(f"{url}: the store gives no version (ETag or generation) of this object, so a change to it "
                   f"could not be told; copy it to a local file or to S3 or GCS")
