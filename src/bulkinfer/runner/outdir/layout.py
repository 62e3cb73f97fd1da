"""Where each of a job's files lives in its output directory, and its manifest, job.json."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from bulkinfer.durable import sync_dir, write_atomic
from bulkinfer.errors import UsageError
from bulkinfer.runner.shards import WHOLE, Shard

MANIFEST_VERSION = 1
_SUFFIX = r"(?:-(\d+)-of-(\d+))?"
_MANIFEST_NAME = re.compile(rf"job{_SUFFIX}\.json")
# Every name a run of any shard creates here (a crash before job.json may leave some of them);
# stats.json is the CLI's end-of-run report (bulkinfer.cli.summary).
_OUR_NAMES = re.compile(rf"(?:job{_SUFFIX}\.json|ledger{_SUFFIX}\.jsonl|shards{_SUFFIX}|\.lock{_SUFFIX}"
                        rf"|\.job{_SUFFIX}\.json\.tmp|stats{_SUFFIX}\.json|\.stats{_SUFFIX}\.json\.tmp)")


class JobDir:
    def __init__(self, root: Path, shard: Shard = WHOLE) -> None:
        self.root = root
        self.shard = shard
        self.manifest_path = root / f"job{shard.suffix}.json"
        self.ledger_path = root / f"ledger{shard.suffix}.jsonl"
        self.results_path = root / f"shards{shard.suffix}"  # the result files
        self.lock_path = root / f".lock{shard.suffix}"

    def has_job(self) -> bool:
        return self.manifest_path.is_file()

    def holds_other_files(self) -> bool:
        """Whether anything but the files of bulkinfer runs is here."""
        return any(not _OUR_NAMES.fullmatch(path.name) for path in self.root.iterdir())

    def siblings(self) -> list[JobDir]:
        """Every shard with a job.json here (this one included, if it has one), in shard order."""
        found = []
        for path in self.root.glob("job*.json"):
            match = _MANIFEST_NAME.fullmatch(path.name)
            if match:
                shard = Shard(int(match[1]), int(match[2])) if match[1] else WHOLE
                found.append(JobDir(self.root, shard))
        return sorted(found, key=lambda directory: (directory.shard.count, directory.shard.index))

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
        self.results_path.mkdir(exist_ok=True)
        write_atomic(self.manifest_path, json.dumps({"version": MANIFEST_VERSION, **manifest}, indent=1).encode())

    def reset(self) -> None:
        """Forget the previous job here. The ledger goes first: without it no result file counts any more."""
        self.ledger_path.unlink(missing_ok=True)
        shutil.rmtree(self.results_path, ignore_errors=True)
        self.manifest_path.unlink(missing_ok=True)
        sync_dir(self.root)


def task_of(fingerprint: dict[str, Any]) -> str:
    """The job's task, as the fingerprint records it: a generation job's fingerprint does not name it."""
    return fingerprint.get("task", "generate")
