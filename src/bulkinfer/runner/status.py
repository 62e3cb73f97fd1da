"""Reading a job back: its output directory as status and export see it, the union of its shards' ledgers.

A job run whole has one shard; a job split with --num-shards has one per shard that has started, and
the shards that have not are named as missing. Committed files are checked against the ledger:
their size always, their SHA-256 and rows when asked (`find_damage`); the ledger's own damaged lines
are named until a run has reported them (`ledger_damage`). Safe to read while runs write.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Iterator

from bulkinfer.errors import UsageError
from bulkinfer.runner.outdir.layout import JobDir, task_of
from bulkinfer.runner.outdir.ledger import Commit, JobProgress
from bulkinfer.runner.outdir.remote_layout import RemoteJobDir
from bulkinfer.runner.outdir.result_files import ResultFiles
from bulkinfer.runner.outdir.store_errors import store_errors
from bulkinfer.runner.storage import is_remote


@dataclass(frozen=True)
class ShardProgress:
    directory: JobDir
    rows: range
    progress: JobProgress

    @property
    def complete(self) -> bool:
        return self.progress.rows_done >= len(self.rows)

    def running(self) -> bool:
        return self.directory.running()


@dataclass(frozen=True)
class JobUnion:
    rows_total: int
    num_shards: int
    shards: list[ShardProgress]  # the shards that have started
    task: str

    @property
    def rows_done(self) -> int:
        return sum(shard.progress.rows_done for shard in self.shards)

    @property
    def rows_failed(self) -> int:
        return sum(shard.progress.rows_failed for shard in self.shards)

    @property
    def missing(self) -> list[int]:
        """Shards that have never started."""
        started = {shard.directory.shard.index for shard in self.shards}
        return [index for index in range(self.num_shards) if index not in started]

    @property
    def unfinished(self) -> list[int]:
        """Shards that have started and are not done (running or interrupted)."""
        return [shard.directory.shard.index for shard in self.shards if not shard.complete]

    def result_files(self) -> Iterator[tuple[ResultFiles, Commit]]:
        """Every committed result file, with the folder that reads it."""
        for shard in self.shards:
            files = shard.directory.results()
            for commit in shard.progress.files:
                yield files, commit

    def running(self) -> bool:
        return any(shard.running() for shard in self.shards)


@dataclass(frozen=True)
class Damage:
    path: str
    reason: str
    commit: Commit

    @property
    def rows(self) -> int:
        return self.commit.rows

    def describe(self) -> str:
        return f"{self.path}: {self.reason} ({self.rows:,} rows)"


def find_damage(union: JobUnion, full: bool) -> list[Damage]:
    """The committed files that are not as the ledger says: missing or of another size; with `full`,
    also other bytes (SHA-256) or other rows than committed."""
    found = []
    for files, commit in union.result_files():
        reason = files.damage(commit.file, commit.size, commit.digest if full else None)
        if reason is None and full and sorted(files.row_ids(commit.file)) != commit.row_ids():
            reason = "its rows are not those committed"
        if reason is not None:
            found.append(Damage(files.location(commit.file), reason, commit))
    return found


def ledger_damage(union: JobUnion) -> list[str]:
    """Each ledger with lines that fail their checksum and that no run has reported yet, with their numbers."""
    found = []
    for shard in union.shards:
        lines = [str(damaged.line) for damaged in shard.progress.new_damage]
        if lines:
            said = "lines {} fail their checksums" if len(lines) > 1 else "line {} fails its checksum"
            found.append(f"{shard.directory.ledger_path}: {said.format(', '.join(lines))}")
    return found


@dataclass(frozen=True)
class JobStatus:
    rows_total: int
    rows_done: int  # in committed files that are as committed
    rows_failed: int
    state: str  # "complete" | "running" | "interrupted" | "damaged"
    num_shards: int = 1
    missing_shards: list[int] = field(default_factory=list)  # never started
    unfinished_shards: list[int] = field(default_factory=list)  # started, not done
    damaged: list[str] = field(default_factory=list)  # damaged result files, each with why, and damaged ledgers
    foreign: list[str] = field(default_factory=list)  # what bulkinfer did not write in a results folder

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        if self.num_shards == 1:  # a job run whole reads as it always has
            for key in ("num_shards", "missing_shards", "unfinished_shards"):
                del record[key]
        for key in ("damaged", "foreign"):
            if not record[key]:
                del record[key]
        return record


def job_status(output: Path | str, verify: bool = False, storage_options: dict[str, Any] | None = None) -> JobStatus:
    """How far the job is. Result files are checked for presence and size; with `verify`, their bytes too,
    and on object storage the damaged ones are voided (see JobDir.settle_damage)."""
    with store_errors_at(output):
        union = load_union(output, storage_options)
        damage = find_damage(union, full=verify)
        if verify:
            for shard in union.shards:
                shard.directory.settle_damage(shard.directory.read_job(shard.progress),
                                              [(item.commit, item.reason) for item in damage
                                               if item.commit in shard.progress.files])
        foreign = [str(path) for shard in union.shards for path in shard.directory.results().foreign()]
    rows_done = union.rows_done - sum(item.rows for item in damage)
    damaged = [item.describe() for item in damage] + ledger_damage(union)
    if union.running():
        state = "running"
    elif damaged:
        state = "damaged"
    elif rows_done >= union.rows_total:
        state = "complete"
    else:
        state = "interrupted"
    return JobStatus(union.rows_total, rows_done, union.rows_failed, state, union.num_shards, union.missing,
                     union.unfinished, damaged, foreign)


def job_root(output: Path) -> Path:
    """The output directory the user named, with `~` expanded; one line if there is no directory there."""
    output = output.expanduser()
    if not output.is_dir():
        raise UsageError(f"{output}: {'not a directory' if output.exists() else 'no such directory'}")
    return output


def store_errors_at(output: Path | str) -> ContextManager[None]:
    """A failing store is one line (store_errors); a local directory's errors are the disk's own."""
    return store_errors(str(output)) if is_remote(str(output)) else nullcontext()


def load_union(output: Path | str, storage_options: dict[str, Any] | None = None) -> JobUnion:
    """The job at `output`, a local directory or a URL on object storage."""
    if is_remote(str(output)):
        directories = RemoteJobDir(str(output), storage_options).siblings()
    else:
        output = job_root(Path(output))
        directories = JobDir(output).siblings()
    if not directories:
        raise UsageError(f"{output}: not a bulkinfer output directory (no job.json)")
    directories[0].check_entries()  # no link among any shard's files before their ledgers and results are read
    progresses = [directory.load_progress() for directory in directories]
    manifests = [directory.read_job(progress) for directory, progress in zip(directories, progresses)]
    counts = {directory.shard.count for directory in directories}
    if len(counts) > 1 or any(manifest["fingerprint"] != manifests[0]["fingerprint"] for manifest in manifests):
        raise UsageError(f"{output} holds shards of different jobs (or of one job split differently); "
                         f"export each job from its own directory")
    rows_total = manifests[0]["rows_total"]
    shards = [ShardProgress(d, d.shard.rows(rows_total), progress) for d, progress in zip(directories, progresses)]
    return JobUnion(rows_total, counts.pop(), shards, task_of(manifests[0]["fingerprint"]))


def shards_left(num_shards: int, missing: list[int], unfinished: list[int]) -> str:
    """"; shards never started: 2; shards unfinished: 0, 3" for a split job with shards to do, else ""."""
    if num_shards == 1:
        return ""
    said = [f"never started: {_listed(missing)}" if missing else "",
            f"unfinished: {_listed(unfinished)}" if unfinished else ""]
    return "".join(f"; shards {part}" for part in said if part)


def _listed(indexes: list[int]) -> str:
    return ", ".join(map(str, indexes))
