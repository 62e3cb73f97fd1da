"""Object storage (s3://, gs://, ...) through fsspec: which paths are on a store, and the filesystem for one.

Credentials come the way each store's library takes them (the AWS environment and profiles,
GOOGLE_APPLICATION_CREDENTIALS); `storage_options` (fsspec's name) passes anything else, such as an
S3-compatible store's endpoint.
"""

from __future__ import annotations

from typing import Any

import fsspec
from fsspec.core import split_protocol


def is_remote(url: str) -> bool:
    """Whether `url` names a place on a store (a protocol other than the local filesystem's)."""
    protocol, _ = split_protocol(str(url))
    return protocol not in (None, "file", "local")


def filesystem_for(url: str, storage_options: dict[str, Any] | None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem that holds `url`, and the path on it."""
    return fsspec.core.url_to_fs(url, **(storage_options or {}))
