"""Everything a run does before the model loads: check inputs and columns, take the output directory,
and decide between a new job and resuming the one already there."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bulkinfer.runner.columns import check_columns
from bulkinfer.runner.committer import Committer
from bulkinfer.runner.config import JobConfig
from bulkinfer.errors import UsageError
from bulkinfer.runner.fingerprint import differences, job_fingerprint
from bulkinfer.runner.inputs import InputFile, identity_of, scan_inputs
from bulkinfer.runner.jobdir import JobDir
from bulkinfer.runner.ledger import Ledger
from bulkinfer.runner.lock import JobLock
from bulkinfer.runner.parts import part_of
from bulkinfer.runner.progress import JobProgress, load_progress
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.shards import ShardStore
from bulkinfer.runner.sources import Source, resolve_sources


@dataclass
class OpenJob:
    """A job whose directory this process holds; close() releases it."""

    directory: JobDir
    files: list[InputFile]
    rows: range  # the row positions this run does: all of them, or its shard's block
    done: RowSet
    progress: JobProgress
    ledger: Ledger
    lock: JobLock

    @property
    def rows_total(self) -> int:
        return len(self.rows)

    def committer(self, config: JobConfig) -> Committer:
        store = ShardStore(self.directory.shards_path, config.output_format)
        return Committer(store, self.ledger, self.progress, config.shard_rows, config.commit_seconds)

    def close(self) -> None:
        self.ledger.close()
        self.lock.release()


def open_job(config: JobConfig) -> OpenJob:
    sources = resolve_sources(config.input, config.input_format)
    check_columns(sources, config)
    part = part_of(config)
    directory = JobDir(Path(config.output), part)
    directory.create_root()
    if not directory.siblings() and directory.holds_other_files():
        raise UsageError(f"{directory.root}: exists, is not empty and holds no bulkinfer job; "
                         f"choose an empty or new --output directory")
    lock = JobLock(directory.lock_path)
    lock.acquire()
    try:
        files = _this_job_files(directory, config, sources)
        done = RowSet()
        progress = load_progress(directory.ledger_path, done)
        ledger = Ledger(directory.ledger_path)  # cuts off a line torn by a crash, before anything is appended
        ShardStore(directory.shards_path).remove_except({span.name for span in progress.shards})
        rows = part.rows(sum(file.rows for file in files))
        return OpenJob(directory, files, rows, done, progress, ledger, lock)
    except BaseException:
        lock.release()
        raise


def _this_job_files(directory: JobDir, config: JobConfig, sources: list[Source]) -> list[InputFile]:
    """The input files of the job in `directory`: the stored ones when it is this job, else a new job."""
    current = _as_stored(job_fingerprint(config, [identity_of(source) for source in sources]))
    _check_siblings(directory, current)
    if directory.has_job():
        manifest = directory.read_manifest()
        changed = differences(manifest["fingerprint"], current)
        if not changed:
            return [InputFile(**item) for item in manifest["inputs"]]
        if not config.force:
            raise UsageError(f"{directory.root} holds a different job ({'; '.join(changed)}); rerun with the "
                             f"same settings to resume it, pass --force to discard its results and start over, "
                             f"or choose another --output")
        directory.reset()
    files = scan_inputs(sources)
    directory.write_manifest({
        "fingerprint": job_fingerprint(config, [file.identity() for file in files]),
        "inputs": [file.to_json() for file in files],
        "rows_total": sum(file.rows for file in files),
        "num_shards": directory.part.count,
        "shard": directory.part.index,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    })
    return files


def _check_siblings(directory: JobDir, current: dict[str, Any]) -> None:
    """The shards running into one directory must be shards of one job, split the same way."""
    for other in directory.siblings():
        if other.part == directory.part:
            continue
        if other.part.count != directory.part.count:
            raise UsageError(f"{directory.root} holds a job split into {other.part.count} shard(s); this run is "
                             f"split into {directory.part.count}: split it the same way, or choose another --output")
        changed = differences(other.read_manifest()["fingerprint"], current)
        if changed:
            raise UsageError(f"{directory.root}: its {other.part.describe()} is a different job "
                             f"({'; '.join(changed)}); every shard must run the same job, or choose another --output")


def _as_stored(value: dict[str, Any]) -> dict[str, Any]:
    """The value as it reads back from job.json (tuples become lists), so equal settings compare equal."""
    return json.loads(json.dumps(value))
