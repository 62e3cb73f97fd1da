"""A job's output directory on object storage (s3://, gs://): the local layout, for a store with no
rename, no append and no lock.

    URL/job.json                              the job record, created once, only if absent
    URL/ledger/000001.json, ...               the ledger, one object per entry (remote_ledger)
    URL/shards/shard-000001-<run id>.parquet  result files, under names unique to their run (remote_files)
    URL/stats.json                            the last run's figures, written by the command line

There is no lock: runs on one URL may overlap and then do some rows twice, but each row is committed
once (remote_ledger). The store is the truth; nothing about the job is kept on the local disk.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from bulkinfer.errors import UsageError
from bulkinfer.runner.outdir.layout import JobDir, is_manifest
from bulkinfer.runner.outdir.ledger import Commit, JobProgress, Void
from bulkinfer.runner.outdir.remote_files import RemoteResultFiles
from bulkinfer.runner.outdir.remote_ledger import RemoteLedger, create, entry_numbers, load_entries
from bulkinfer.runner.outdir.store_errors import store_errors
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.shards import WHOLE, Shard
from bulkinfer.runner.storage import filesystem_for

# The stores whose conditional create the protocol relies on.
OUTPUT_PROTOCOLS = ("s3", "s3a", "gs", "gcs")
_OUR_NAMES = {"job.json", "ledger", "shards", "stats.json"}


class RemoteJobDir(JobDir):
    """The job at `url`; the same interface as the local JobDir, whose trust in the job record it keeps
    (job_record, read_job): here job.json is the one copy, never rewritten, and the commits name its job."""

    verified_at_start = False  # hashing every file at each start would download the whole job

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, shard: Shard = WHOLE) -> None:
        protocol = url.split("://", 1)[0].lower()
        if protocol not in OUTPUT_PROTOCOLS:
            raise UsageError(f"{url}: an output on object storage must be s3:// or gs:// (their conditional "
                             f"create keeps each row committed once)")
        if not shard.whole:
            raise UsageError(f"{url}: --num-shards is for local output directories; on object storage, run the "
                             f"job whole (runs may share its URL)")
        try:
            self.fs, _ = filesystem_for(url, storage_options)
            if hasattr(self.fs, "connect"):  # s3fs takes its options only when it makes its client
                self.fs.connect()
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{url}: storage_options {storage_options} are not the store's ({exc})") from None
        self.root = url.rstrip("/")  # type: ignore[assignment]
        self.shard = shard
        self.manifest_path = f"{self.root}/job.json"  # type: ignore[assignment]
        self.ledger_path = f"{self.root}/ledger"  # type: ignore[assignment]
        self.results_path = f"{self.root}/shards"  # type: ignore[assignment]

    def results(self, fmt: str = "parquet", input_types: dict[str, pa.DataType] | None = None,
                result_types: dict[str, pa.DataType] | None = None) -> RemoteResultFiles:
        return RemoteResultFiles(self.fs, self.results_path, fmt, input_types, result_types)

    def check_free(self) -> None:
        if not self.has_job() and set(self._names()) - _OUR_NAMES:
            raise UsageError(f"{self.root}: holds objects and no bulkinfer job; choose an empty or new --output")

    def has_job(self) -> bool:
        """A sound job.json, or a ledger (a job whose record is lost is still a job: it is refused, never
        overwritten)."""
        return self.read_manifest() is not None or bool(entry_numbers(self.fs, self.ledger_path))

    def check_entries(self) -> None:
        """Nothing to check: a store has no links, FIFOs or devices."""

    def siblings(self) -> list[JobDir]:
        return [self] if self.has_job() else []

    def create_root(self) -> None:
        """Nothing to create: a store's folders are prefixes of its objects' names."""

    def running(self) -> bool:
        """Unknown without a lock; runs here are told apart by the ledger alone."""
        return False

    def read_manifest(self) -> dict[str, Any] | None:
        with store_errors(self.root):
            try:
                manifest = json.loads(self.fs.cat_file(self.manifest_path))
            except (FileNotFoundError, ValueError):
                return None
        return manifest if is_manifest(manifest) else None

    def write_manifest(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create job.json if no run has; a run that started the same job at the same moment wins."""
        if create(self.fs, self.manifest_path, json.dumps(manifest, indent=1).encode()):
            return manifest
        stored = self.read_manifest()
        if stored is None or stored["fingerprint"] != manifest["fingerprint"]:
            raise UsageError(f"{self.root}: another run started a different job here meanwhile; choose another "
                             f"--output")
        return stored

    def reset(self) -> None:
        """Forget the previous job here: the ledger first, without which no result file counts."""
        with store_errors(self.root):
            for url in (self.ledger_path, self.results_path, self.manifest_path):
                if self.fs.exists(url):
                    self.fs.rm(url, recursive=True)
            self.fs.invalidate_cache(self.root)

    def load_progress(self) -> JobProgress:
        return load_entries(self.fs, self.ledger_path)

    def open_ledger(self, job: dict[str, Any], progress: JobProgress, done: RowSet) -> RemoteLedger:
        return RemoteLedger(self.fs, self.ledger_path, progress, done, job)

    def prepare_results(self, progress: JobProgress) -> None:
        """Nothing: files no entry lists may be about to be committed by another run (remote_files)."""

    def settle_damage(self, job: dict[str, Any], damaged: list[tuple[Commit, str]]) -> None:
        """Void each damaged file, so that the next run redoes its rows: a run's start checks only sizes
        here, as hashing every file would download the whole job."""
        if damaged:
            progress = self.load_progress()
            ledger = self.open_ledger(job, progress, RowSet())
            for commit, reason in damaged:
                if commit.seq in progress.commits:
                    ledger.append(Void(commit.seq, commit.file, reason))

    def _names(self) -> list[str]:
        with store_errors(self.root):
            self.fs.invalidate_cache(self.root)
            try:
                return [path.rstrip("/").rsplit("/", 1)[1] for path in self.fs.ls(self.root, detail=False)]
            except FileNotFoundError:
                return []

