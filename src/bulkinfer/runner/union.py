"""A job's output directory as status and export see it: the union of its shards' ledgers.

A job run whole has one part; a job split with --num-shards has one per shard that has started, and
the shards that have not are named as missing. Safe to read while runs are writing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bulkinfer.errors import UsageError
from bulkinfer.runner.fingerprint import task_of
from bulkinfer.runner.jobdir import JobDir
from bulkinfer.runner.lock import current_holder
from bulkinfer.runner.progress import JobProgress, ShardSpan, load_progress
from bulkinfer.runner.shards import ShardStore


@dataclass(frozen=True)
class PartProgress:
    directory: JobDir
    rows: range
    progress: JobProgress

    @property
    def complete(self) -> bool:
        return self.progress.rows_done >= len(self.rows)

    def running(self) -> bool:
        return current_holder(self.directory.lock_path) is not None


@dataclass(frozen=True)
class JobUnion:
    rows_total: int
    num_shards: int
    parts: list[PartProgress]  # the shards that have started
    task: str

    @property
    def rows_done(self) -> int:
        return sum(part.progress.rows_done for part in self.parts)

    @property
    def rows_failed(self) -> int:
        return sum(part.progress.rows_failed for part in self.parts)

    @property
    def missing(self) -> list[int]:
        """Shards that have never started."""
        started = {part.directory.part.index for part in self.parts}
        return [index for index in range(self.num_shards) if index not in started]

    @property
    def unfinished(self) -> list[int]:
        """Shards that have started and are not done (running or interrupted)."""
        return [part.directory.part.index for part in self.parts if not part.complete]

    def spans(self) -> Iterator[tuple[ShardStore, ShardSpan]]:
        """Every committed result shard, with the store that reads it."""
        for part in self.parts:
            store = ShardStore(part.directory.shards_path)
            for span in part.progress.shards:
                yield store, span


def shards_left(num_shards: int, missing: list[int], unfinished: list[int]) -> str:
    """"; never started: 2; unfinished: 0, 3" for a split job with shards to do, else ""."""
    if num_shards == 1:
        return ""
    said = [f"never started: {_listed(missing)}" if missing else "",
            f"unfinished: {_listed(unfinished)}" if unfinished else ""]
    return "".join(f"; shards {part}" for part in said if part)


def _listed(indexes: list[int]) -> str:
    return ", ".join(map(str, indexes))


def load_union(output: Path) -> JobUnion:
    parts = JobDir(output).siblings()
    if not parts:
        raise UsageError(f"{output}: not a bulkinfer output directory (no job.json)")
    manifests = [part.read_manifest() for part in parts]
    counts = {part.part.count for part in parts}
    if len(counts) > 1 or any(manifest["fingerprint"] != manifests[0]["fingerprint"] for manifest in manifests):
        raise UsageError(f"{output} holds shards of different jobs (or of one job split differently); "
                         f"export each job from its own directory")
    rows_total = manifests[0]["rows_total"]
    progress = [PartProgress(part, part.part.rows(rows_total), load_progress(part.ledger_path)) for part in parts]
    return JobUnion(rows_total, counts.pop(), progress, task_of(manifests[0]["fingerprint"]))
