"""Result files on object storage: written whole under a name no other run uses, read back in place.

A store has no rename, so a file cannot be written under a temporary name and then published.
Instead each file is one PUT (or one multipart upload, which the store shows only once complete)
under a name that holds the writing run's id: a name the ledger lists is never written again, so a
listed file is never half-written nor replaced by another run's. Files no entry lists (a crash, or
a race lost to another run, between upload and commit) are left where they are: status and export
read only listed files, and deleting one could delete a file a live run is about to commit.
"""

from __future__ import annotations

import hashlib
import io
import re
import uuid
from typing import IO, Any

import fsspec
import pyarrow as pa

from bulkinfer.runner.outdir.result_files import EXTENSIONS, ResultFiles, WrittenFile, file_digest
from bulkinfer.runner.outdir.store_errors import store_errors

_OUR_FILE = re.compile(r"shard-\d{6,}-[0-9a-f]{12}\.(?:parquet|jsonl)")


class RemoteResultFiles(ResultFiles):
    """The results folder of a job on a store; `directory` is its URL."""

    def __init__(self, fs: fsspec.AbstractFileSystem, directory: str, fmt: str = "parquet",
                 input_types: dict[str, pa.DataType] | None = None,
                 result_types: dict[str, pa.DataType] | None = None) -> None:
        super().__init__(directory, fmt, input_types, result_types)  # type: ignore[arg-type]
        self.fs = fs
        self.run_id = uuid.uuid4().hex[:12]
        self._sizes: dict[str, int] | None = None

    def path_of(self, seq: int) -> str:  # type: ignore[override]
        return self.location(f"shard-{seq:06d}-{self.run_id}{EXTENSIONS[self.format]}")

    def location(self, name: str) -> str:
        return f"{self.directory}/{name}"

    def write(self, seq: int, rows: list[dict[str, Any]]) -> WrittenFile:
        buffer = io.BytesIO()
        errors = self.serialize(buffer, rows)
        data, path = buffer.getvalue(), self.path_of(seq)
        with store_errors(path):
            self.fs.pipe_file(path, data)
        return WrittenFile(path.rsplit("/", 1)[1], len(data), hashlib.sha256(data).hexdigest(), errors)

    def damage(self, name: str, size: int | None, digest: str | None) -> str | None:
        """Sizes come from one listing of the folder; with `digest`, the file is downloaded and hashed."""
        actual = self._listed_sizes().get(name)
        if actual is None:
            return "missing"
        if size is not None and actual != size:
            return f"{actual:,} bytes where {size:,} were committed"
        if digest is not None:
            with self._reader(name) as handle:
                if file_digest(handle) != digest:
                    return "its bytes differ from those committed"
        return None

    def foreign(self) -> list[str]:  # type: ignore[override]
        return sorted(self.location(name) for name in self._listed_sizes() if not _OUR_FILE.fullmatch(name))

    def _listed_sizes(self) -> dict[str, int]:
        if self._sizes is None:
            self.fs.invalidate_cache(self.directory)
            try:
                entries = self.fs.ls(self.directory, detail=True)
            except FileNotFoundError:
                entries = []
            self._sizes = {entry["name"].rsplit("/", 1)[1]: entry["size"] for entry in entries
                           if entry["type"] == "file"}
        return self._sizes

    def _reader(self, name: str) -> IO[bytes]:
        return self.fs.open(self.location(name), "rb")
