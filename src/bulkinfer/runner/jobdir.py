"""The output directory of a job and what lives in it.

    OUT/job.json      the job's fingerprint, input files with row counts, rows_total (written once)
    OUT/ledger.jsonl  append-only record of committed shards (see ledger.py)
    OUT/shards/       result shards; only those the ledger lists count
    OUT/.lock         held by the run writing here (see lock.py)

A job split into N shards (see parts.py) keeps one set of these per shard, named with the shard's
suffix (`job-2-of-4.json`, `ledger-2-of-4.jsonl`, `shards-2-of-4/`, `.lock-2-of-4`), so the shards
can run at once on one directory, each with its own lock and ledger, and each resumes on its own.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from bulkinfer.durable import sync_dir, write_atomic
from bulkinfer.errors import UsageError
from bulkinfer.runner.parts import WHOLE, Part

MANIFEST_VERSION = 1
_SUFFIX = r"(?:-(\d+)-of-(\d+))?"
_MANIFEST_NAME = re.compile(rf"job{_SUFFIX}\.json")
# Every name a run of any shard creates here (a crash before job.json may leave some of them);
# stats.json is the CLI's end-of-run report (bulkinfer.cli.summary).
_OUR_NAMES = re.compile(rf"(?:job{_SUFFIX}\.json|ledger{_SUFFIX}\.jsonl|shards{_SUFFIX}|\.lock{_SUFFIX}"
                        rf"|\.job{_SUFFIX}\.json\.tmp|stats{_SUFFIX}\.json|\.stats{_SUFFIX}\.json\.tmp)")


class JobDir:
    def __init__(self, root: Path, part: Part = WHOLE) -> None:
        self.root = root
        self.part = part
        self.manifest_path = root / f"job{part.suffix}.json"
        self.ledger_path = root / f"ledger{part.suffix}.jsonl"
        self.shards_path = root / f"shards{part.suffix}"
        self.lock_path = root / f".lock{part.suffix}"

    def has_job(self) -> bool:
        return self.manifest_path.is_file()

    def holds_other_files(self) -> bool:
        """Whether anything but the files of bulkinfer runs is here."""
        return any(not _OUR_NAMES.fullmatch(path.name) for path in self.root.iterdir())

    def siblings(self) -> list[JobDir]:
        """Every part with a job.json here (this one included, if it has one), in shard order."""
        found = []
        for path in self.root.glob("job*.json"):
            match = _MANIFEST_NAME.fullmatch(path.name)
            if match:
                part = Part(int(match[1]), int(match[2])) if match[1] else WHOLE
                found.append(JobDir(self.root, part))
        return sorted(found, key=lambda directory: (directory.part.count, directory.part.index))

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
