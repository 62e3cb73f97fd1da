"""hf://datasets/ORG/NAME[@REVISION]/PATH read from the Hub's local cache when HF_HUB_OFFLINE is set, as
huggingface_hub resolves it offline: a cluster whose nodes cannot reach the Hub downloads a dataset ahead
of the job (huggingface-cli download --repo-type dataset) and reads it from HF_HUB_CACHE.

The cache keeps each revision's files under snapshots/<commit>/ as links to blobs named by their Hub
object id; that id is the object's version in the job's fingerprint, as the Hub's blob id is online.
"""

from __future__ import annotations

import os
import re
from typing import Any

from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from bulkinfer.errors import UsageError

_DATASET_URL = re.compile(r"hf://datasets/([^/@]+/[^/@]+)(?:@([^/]+))?/?(.*)$")


class HubCacheFileSystem(DirFileSystem):
    """One revision of a dataset in the cache: its paths are the dataset's own, its URLs hf:// ones."""

    def __init__(self, snapshot: str, url_root: str) -> None:
        super().__init__(path=snapshot, fs=LocalFileSystem())
        self.url_root = url_root

    def unstrip_protocol(self, path: str) -> str:
        return self.url_root + path.lstrip("/")

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        info = super().info(path, **kwargs)
        if info["type"] == "file":
            info["blob_id"] = os.path.basename(os.path.realpath(self._join(path)))
        return info


def cached_filesystem(url: str) -> tuple[HubCacheFileSystem, str]:
    """The cached revision that `url` names (default: the one main pointed to when it was downloaded)
    and the path in it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    match = _DATASET_URL.match(url)
    if match is None:
        raise UsageError(f"{url}: name a dataset as hf://datasets/ORG/NAME/PATH (optionally NAME@REVISION)")
    repo, revision, path = match.groups()
    cache = os.environ.get("HF_HUB_CACHE")  # as set now; None: huggingface_hub's default (under HF_HOME)
    try:
        snapshot = snapshot_download(repo, repo_type="dataset", revision=revision, cache_dir=cache,
                                     local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        raise UsageError(f"{url}: dataset {repo} is not in the Hub cache ({cache or 'the default'}) and "
                         f"HF_HUB_OFFLINE is set; download it first, or unset HF_HUB_OFFLINE") from None
    url_root = f"hf://datasets/{repo}{'@' + revision if revision else ''}/"
    return HubCacheFileSystem(snapshot, url_root), path
