"""The output directory of a job and what lives in it.

    OUT/job.json      the job's fingerprint, input files with row counts, rows_total (written once)
    OUT/ledger.jsonl  append-only record of committed shards (see ledger.py)
    OUT/shards/       result shards; only those the ledger lists count
    OUT/.lock         held by the run writing here (see lock.py)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from bulkinfer.runner.durable import sync_dir, write_atomic
from bulkinfer.runner.errors import UsageError

MANIFEST_VERSION = 1


class JobDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest_path = root / "job.json"
        self.ledger_path = root / "ledger.jsonl"
        self.shards_path = root / "shards"
        self.lock_path = root / ".lock"

    def has_job(self) -> bool:
        return self.manifest_path.is_file()

    def holds_other_files(self) -> bool:
        """Whether anything but our own files is here (a crash before job.json may leave some of ours)."""
        ours = {self.lock_path.name, self.shards_path.name, self.ledger_path.name, f".{self.manifest_path.name}.tmp"}
        return any(path.name not in ours for path in self.root.iterdir())

    def require_job(self) -> None:
        if not self.has_job():
            raise UsageError(f"{self.root}: not a bulkinfer output directory (no job.json)")

    def create_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{self.root}: cannot create the output directory ({exc.strerror})") from None
        if not self.root.is_dir():
            raise UsageError(f"{self.root}: exists and is not a directory")

    def read_manifest(self) -> dict[str, Any]:
        try:
            manifest = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{self.manifest_path}: cannot be read ({exc})") from None
        if manifest.get("version") != MANIFEST_VERSION:
            raise UsageError(f"{self.manifest_path}: written by an incompatible bulkinfer version")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.shards_path.mkdir(exist_ok=True)
        write_atomic(self.manifest_path, json.dumps({"version": MANIFEST_VERSION, **manifest}, indent=1).encode())

    def reset(self) -> None:
        """Forget the previous job here. The ledger goes first: without it no shard counts any more."""
        self.ledger_path.unlink(missing_ok=True)
        shutil.rmtree(self.shards_path, ignore_errors=True)
        self.manifest_path.unlink(missing_ok=True)
        sync_dir(self.root)
