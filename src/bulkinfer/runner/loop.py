"""The loop: keep the engine's queue full across windows, step it, commit what finishes, and report.

Windows of rows are read and prepared a few ahead in a background thread (Prefetcher), so the
engine never waits for the tokenizer. Every step, a Snapshot goes to the Reporter, if there is one.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, Iterator, Protocol, TypeVar

from bulkinfer.runner.outdir.commit import Committer
from bulkinfer.runner.tasks.base import Task
from bulkinfer.runner.tasks.work import PreparedWindow, Work

IDLE_POLL = 0.1  # seconds to wait for the next window when the engine has nothing to do
In = TypeVar("In")
Out = TypeVar("Out")
_END = object()
NOT_READY = object()
_PUT_WAIT = 0.1  # seconds between checks for close() while the queue is full


@dataclass(frozen=True)
class Snapshot:
    rows_total: int
    rows_done: int  # finished, committed or not
    rows_failed: int
    rows_at_start: int  # already done when this run started
    elapsed: float  # seconds since this run started its loop
    engine_stats: Any  # the engine's EngineStats


class Reporter(Protocol):
    def update(self, snapshot: Snapshot) -> None: ...


class JobLoop:
    def __init__(self, llm: Any, windows: Prefetcher[PreparedWindow], committer: Committer,
                 task: Task, in_flight_target: int, stop_requested: Callable[[], bool],
                 rows_total: int, reporter: Reporter | None = None) -> None:
        self.llm = llm
        self.windows = windows
        self.committer = committer
        self.task = task
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
        work.send(self.llm)
        self.in_flight[work.request_id] = work

    def _take_window(self) -> bool:
        # Only wait for the reader when the engine would otherwise sit idle.
        idle = not self.llm.has_unfinished_requests()
        window = self.windows.get(timeout=IDLE_POLL if idle else 0)
        if window is None or window is NOT_READY:
            return False
        for failure in window.failures:
            self.committer.add(self.task.failure(failure.row, failure.error, failure.prompt_tokens))
        self.pending.extend(window.work)
        return True

    def _step(self) -> None:
        for output in self.llm.step():
            # None while a row still waits for others of its requests.
            row = self.task.collect(self.in_flight.pop(output.request_id), output)
            if row is not None:
                self.committer.add(row)


class Prefetcher(Generic[Out]):
    """Hands out `work(item)` for each item, computed in a thread while the caller uses the last.

    At most `depth` results wait in the queue, so memory is bounded by a few windows. An exception in
    the thread is raised again in the caller.
    """

    def __init__(self, items: Iterator[In], work: Callable[[In], Out], depth: int = 2) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._closed = threading.Event()
        self.finished = False
        self._thread = threading.Thread(target=self._run, args=(items, work), name="bulkinfer-prefetch",
                                        daemon=True)
        self._thread.start()

    def get(self, timeout: float) -> Out | None | object:
        """The next result; None after the last; NOT_READY when it is not done within `timeout` seconds."""
        if self.finished:
            return None
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return NOT_READY
        if item is _END:
            self.finished = True
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop at the next result. Not joined: a stopping job need not wait for a window it will not use."""
        self._closed.set()

    def _run(self, items: Iterator[In], work: Callable[[In], Out]) -> None:
        try:
            for item in items:
                if not self._put(work(item)):
                    return
        except BaseException as exc:  # handed to the consumer, which decides what to do with it
            self._put(exc)
            return
        self._put(_END)

    def _put(self, value: object) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(value, timeout=_PUT_WAIT)
                return True
            except queue.Full:
                continue
        return False
