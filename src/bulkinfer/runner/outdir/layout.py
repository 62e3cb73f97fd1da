"""Where each of a job's files lives in its output directory, and its manifest, job.json."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from bulkinfer.durable import sync_dir, write_atomic
from bulkinfer.errors import UsageError
from bulkinfer.runner.outdir.ledger import read_records
from bulkinfer.runner.outdir.no_links import link_refusal, read_no_follow
from bulkinfer.runner.shards import WHOLE, Shard

MANIFEST_VERSION = 1
_SUFFIX = r"(?:-(\d+)-of-(\d+))?"
_JOB_FILE_NAME = re.compile(rf"(?:job{_SUFFIX}\.json|ledger{_SUFFIX}\.jsonl)")
# Every name a run of any shard creates here (a crash before job.json may leave some of them);
# stats.json is the CLI's end-of-run report (bulkinfer.cli.summary).
_OUR_NAMES = re.compile(rf"(?:job{_SUFFIX}\.json|ledger{_SUFFIX}\.jsonl|shards{_SUFFIX}|\.lock{_SUFFIX}"
                        rf"|\.job{_SUFFIX}\.json\.tmp|stats{_SUFFIX}\.json|\.stats{_SUFFIX}\.json\.tmp)")
_RESULTS_FOLDER = re.compile(rf"shards{_SUFFIX}")


class JobDir:
    def __init__(self, root: Path, shard: Shard = WHOLE) -> None:
        self.root = root
        self.shard = shard
        self.manifest_path = root / f"job{shard.suffix}.json"
        self.ledger_path = root / f"ledger{shard.suffix}.jsonl"
        self.results_path = root / f"shards{shard.suffix}"  # the result files
        self.lock_path = root / f".lock{shard.suffix}"

    def has_job(self) -> bool:
        """Whether a job was started here: its job.json, or its ledger if job.json is gone."""
        return self.manifest_path.is_file() or self.ledger_path.is_file()

    def holds_other_files(self) -> bool:
        """Whether anything but the files of bulkinfer runs is here."""
        return any(not _OUR_NAMES.fullmatch(path.name) for path in self.root.iterdir())

    def check_entries(self) -> None:
        """Raises UsageError naming the first of bulkinfer's entries here (of any shard) or file in a
        results folder that is a symbolic link (see no_links), or a FIFO, socket or device where a
        file should be (opening it could hang)."""
        for path in sorted(self.root.iterdir()):
            if not _OUR_NAMES.fullmatch(path.name):
                continue
            if path.is_symlink():
                raise UsageError(link_refusal(path))
            if _RESULTS_FOLDER.fullmatch(path.name) and path.is_dir():
                linked = next((inner for inner in sorted(path.iterdir()) if inner.is_symlink()), None)
                if linked is not None:
                    raise UsageError(link_refusal(linked))
            elif not path.is_file():
                raise UsageError(f"{path}: is not a regular file, so it is not bulkinfer's; move it away, or "
                                 f"choose another --output")

    def siblings(self) -> list[JobDir]:
        """Every shard with a job here (this one included, if it has one), in shard order."""
        found = set()
        for path in self.root.iterdir():
            match = _JOB_FILE_NAME.fullmatch(path.name)
            if match:
                index, count = (match[1], match[2]) if match[1] else (match[3], match[4])
                found.add(Shard(int(index), int(count)) if index else WHOLE)
        return [JobDir(self.root, shard) for shard in sorted(found, key=lambda shard: (shard.count, shard.index))]

    def create_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{self.root}: cannot create the output directory ({exc.strerror})") from None
        if not self.root.is_dir():
            raise UsageError(f"{self.root}: exists and is not a directory")

    def read_job(self) -> dict[str, Any]:
        """The job's manifest as the ledger records it, which job.json copies; job.json alone for a
        ledger older than that record."""
        job = next((record for record in read_records(self.ledger_path) if isinstance(record, dict)), None)
        return _checked(self.ledger_path, job) if job is not None else self.read_manifest()

    def read_manifest(self) -> dict[str, Any]:
        """job.json as it is on disk."""
        try:
            with read_no_follow(self.manifest_path) as handle:
                manifest = json.loads(handle.read())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{self.manifest_path}: cannot be read ({exc})") from None
        return _checked(self.manifest_path, manifest)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.results_path.mkdir(exist_ok=True)
        write_atomic(self.manifest_path, json.dumps(manifest, indent=1).encode())

    def reset(self) -> None:
        """Forget the previous job here. The ledger goes first: without it no result file counts any more."""
        self.ledger_path.unlink(missing_ok=True)
        shutil.rmtree(self.results_path, ignore_errors=True)
        self.manifest_path.unlink(missing_ok=True)
        sync_dir(self.root)


def new_manifest(fingerprint: dict[str, Any], inputs: list[dict[str, Any]], rows_total: int,
                 shard: Shard) -> dict[str, Any]:
    return {"version": MANIFEST_VERSION, "fingerprint": fingerprint, "inputs": inputs, "rows_total": rows_total,
            "num_shards": shard.count, "shard": shard.index, "created": time.strftime("%Y-%m-%d %H:%M:%S")}


def _checked(path: Path, manifest: Any) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        raise UsageError(f"{path}: written by an incompatible bulkinfer version")
    return manifest


def task_of(fingerprint: dict[str, Any]) -> str:
    """The job's task, as the fingerprint records it: a generation job's fingerprint does not name it."""
    return fingerprint.get("task", "generate")
