"""What the ledger says is done: counts for status, shard spans for export, the done-set for resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bulkinfer.runner.ledger import LedgerCorruptError, read_commits
from bulkinfer.runner.rowset import RowSet


@dataclass(frozen=True)
class ShardSpan:
    name: str
    first: int
    last: int


@dataclass
class JobProgress:
    rows_done: int = 0  # rows with a result or an error
    rows_failed: int = 0  # rows with an error
    shards: list[ShardSpan] = field(default_factory=list)
    next_seq: int = 1


def load_progress(ledger_path: Path, done: RowSet | None = None) -> JobProgress:
    """Fold the ledger; with `done`, also add every committed row to it and check none is there twice."""
    progress = JobProgress()
    for commit in read_commits(ledger_path):
        progress.rows_done += commit.rows
        progress.rows_failed += commit.errors
        progress.shards.append(ShardSpan(commit.shard, commit.first, commit.last))
        progress.next_seq = commit.seq + 1
        if done is not None:
            for row in commit.row_ids():
                if not done.add(row):
                    raise LedgerCorruptError(f"{ledger_path}: row {row} is committed twice ({commit.shard})")
    return progress
