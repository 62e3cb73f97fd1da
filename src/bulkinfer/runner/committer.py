"""Collect finished rows and commit them as a shard plus a ledger line, by size or by age."""

from __future__ import annotations

import time
from typing import Any, Callable

from bulkinfer.runner.ledger import Ledger, make_commit
from bulkinfer.runner.progress import JobProgress, ShardSpan
from bulkinfer.runner.rows import ROW_INDEX
from bulkinfer.runner.shards import ShardStore


class Committer:
    """The age limit bounds what a crash can lose to `commit_seconds` of work; the size limit bounds memory."""

    def __init__(self, store: ShardStore, ledger: Ledger, progress: JobProgress, shard_rows: int,
                 commit_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.ledger = ledger
        self.progress = progress
        self.shard_rows = shard_rows
        self.commit_seconds = commit_seconds
        self.clock = clock
        self._rows: list[dict[str, Any]] = []
        self._errors = 0
        self._since = clock()

    @property
    def buffered(self) -> int:
        return len(self._rows)

    @property
    def buffered_errors(self) -> int:
        return self._errors

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        self._errors += row["error"] is not None

    def commit_if_due(self) -> None:
        if len(self._rows) >= self.shard_rows or self.clock() - self._since >= self.commit_seconds:
            self.commit()

    def commit(self) -> None:
        """Shard first, then the ledger line: a crash between the two only leaves an orphan file."""
        self._since = self.clock()
        if not self._rows:
            return
        seq = self.progress.next_seq
        name = self.store.write(seq, self._rows)
        row_ids = [row[ROW_INDEX] for row in self._rows]
        commit = make_commit(seq, name, row_ids, self._errors)
        self.ledger.append(commit)
        self.progress.rows_done += commit.rows
        self.progress.rows_failed += commit.errors
        self.progress.shards.append(ShardSpan(name, commit.first, commit.last))
        self.progress.next_seq = seq + 1
        self._rows, self._errors = [], 0
