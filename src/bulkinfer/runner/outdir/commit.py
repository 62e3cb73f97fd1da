"""Collect finished rows and commit them as a result file plus a ledger entry, by count or by age."""

from __future__ import annotations

import time
from typing import Any, Callable

from bulkinfer.errors import disk_error
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.outdir.ledger import Commit, JobProgress, Ledger, make_commit
from bulkinfer.runner.outdir.remote_ledger import RemoteLedger, SeqTaken
from bulkinfer.runner.outdir.result_files import FILE_CELLS, ResultFiles
from bulkinfer.runner.rowset import RowSet


class Committer:
    """The age limit bounds what a crash can lose to `commit_seconds` of work; the count limits (rows, and
    rows x distinct columns) bound memory.

    A commit that fails (a full disk, an I/O error) raises RunError and is not tried again by this run:
    its rows stay out of the ledger and are done again by the next run, so none is committed twice.
    `check` is called before each commit and raises RunError when this run may not commit: it no longer
    owns the directory, or an input has changed under it.
    """

    def __init__(self, files: ResultFiles, ledger: Ledger | RemoteLedger, progress: JobProgress, done: RowSet,
                 max_rows: int, commit_seconds: float, check: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`done`: the rows of every live commit the run knows of."""
        self.files = files
        self.ledger = ledger
        self.progress = progress
        self.done = done
        self.max_rows = max_rows
        self.commit_seconds = commit_seconds
        self.check = check
        self.clock = clock
        self._rows: list[dict[str, Any]] = []
        self._columns: set[str] = set()
        self._errors = 0
        self._since = clock()
        self._failed = False

    @property
    def buffered(self) -> int:
        return len(self._rows)

    @property
    def buffered_errors(self) -> int:
        return self._errors

    def add(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        self._columns.update(row)
        self._errors += row["error"] is not None

    def commit_if_due(self) -> None:
        if (len(self._rows) >= self.max_rows or len(self._rows) * len(self._columns) >= FILE_CELLS
                or self.clock() - self._since >= self.commit_seconds):
            self.commit()

    def commit(self) -> None:
        """The file first, then the ledger entry: a crash between the two only leaves an orphan file.

        On object storage another run may take the entry's number first (SeqTaken): the ledger then has
        read the entries up to the first free number, adding their rows to `done`, and the rows that no
        live commit holds are written again under the next number. Rows in `done` are left out of every
        try, also those that finish after the run learned of their commit. So when an entry is created,
        its run knows every entry before it, and none of its rows is in a live commit among them."""
        self._since = self.clock()
        if not self._rows or self._failed:
            return
        self._failed = True  # until this commit is through: a failure anywhere in it is not retried
        self.check()
        while self._drop_done():
            try:
                commit = self._write_and_commit(self.progress.next_seq)
            except SeqTaken:
                continue
            self.progress.record(commit)
            self._rows, self._columns, self._errors = [], set(), 0
        self._failed = False

    def _write_and_commit(self, seq: int) -> Commit:
        try:
            written = self.files.write(seq, self._rows)
        except OSError as exc:
            raise disk_error(exc, str(self.files.path_of(seq))) from None
        commit = make_commit(seq, written.name, [row[ROW_INDEX] for row in self._rows], written.errors,
                             written.size, written.digest)
        try:
            self.ledger.append(commit)
        except OSError as exc:
            raise disk_error(exc, str(self.ledger.path)) from None
        return commit

    def _drop_done(self) -> bool:
        """Leave out the rows that another run has committed meanwhile; whether any rows are left."""
        kept = [row for row in self._rows if row[ROW_INDEX] not in self.done]
        if len(kept) < len(self._rows):
            self._rows = kept
            self._columns = {column for row in kept for column in row}
            self._errors = sum(row["error"] is not None for row in kept)
        return bool(self._rows)
