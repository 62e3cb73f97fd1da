"""The engine loop: keep the engine's queue full across windows, step it, commit what finishes."""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Hashable

from bulkinfer.runner.committer import Committer
from bulkinfer.runner.pipeline import NOT_READY, Prefetcher
from bulkinfer.runner.prepare import PreparedWindow, Work
from bulkinfer.runner.report import Reporter, Snapshot
from bulkinfer.runner.results import ResultBuilder
from bulkinfer.runner.score_results import ScoreResults

IDLE_POLL = 0.1  # seconds to wait for the next window when the engine has nothing to do


class JobLoop:
    def __init__(self, llm: Any, windows: Prefetcher[PreparedWindow], committer: Committer,
                 results: ResultBuilder | ScoreResults, in_flight_target: int, stop_requested: Callable[[], bool],
                 rows_total: int, reporter: Reporter | None = None) -> None:
        self.llm = llm
        self.windows = windows
        self.committer = committer
        self.results = results
        self.target = in_flight_target
        self.stop_requested = stop_requested
        self.rows_total = rows_total
        self.reporter = reporter
        self.pending: deque[Work] = deque()  # prepared, not yet handed to the engine
        self.in_flight: dict[Hashable, Work] = {}  # request id -> what was sent
        self._rows_at_start = committer.progress.rows_done
        self._started = time.monotonic()

    def run(self) -> bool:
        """True when every row has been done and committed; False when stopped by a signal.

        Finished rows are committed on the way out either way; rows still in the engine are dropped
        and will be done again on resume.
        """
        try:
            while not self.stop_requested():
                self._admit()
                if self.llm.has_unfinished_requests():
                    self._step()
                elif self.windows.finished and not self.pending:
                    return True
                self.committer.commit_if_due()
                if self.reporter:
                    self.reporter.update(self.snapshot())
            return False
        finally:
            self.committer.commit()

    def snapshot(self) -> Snapshot:
        progress = self.committer.progress
        return Snapshot(self.rows_total, progress.rows_done + self.committer.buffered,
                        progress.rows_failed + self.committer.buffered_errors, self._rows_at_start,
                        time.monotonic() - self._started, self.llm.stats)

    def _admit(self) -> None:
        """Top the engine up to the target, so its running batch never drains at a window boundary."""
        while self.llm.num_unfinished_requests < self.target:
            if not self.pending and not self._take_window():
                return
            if self.pending:
                self._send(self.pending.popleft())

    def _send(self, work: Work) -> None:
        if work.score_from is None:
            self.llm.add_request(work.request_id, work.token_ids, work.params)
        else:
            self.llm.add_scoring_request(work.request_id, work.token_ids, work.score_from)
        self.in_flight[work.request_id] = work

    def _take_window(self) -> bool:
        # Only wait for the reader when the engine would otherwise sit idle.
        idle = not self.llm.has_unfinished_requests()
        window = self.windows.get(timeout=IDLE_POLL if idle else 0)
        if window is None or window is NOT_READY:
            return False
        for failure in window.failures:
            self.committer.add(self.results.failure(failure.row, failure.error, failure.prompt_tokens))
        self.pending.extend(window.work)
        return True

    def _step(self) -> None:
        for output in self.llm.step():
            # None while a row still waits for others of its requests.
            row = self.results.collect(self.in_flight.pop(output.request_id), output)
            if row is not None:
                self.committer.add(row)
