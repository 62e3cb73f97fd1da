"""Read and prepare windows in a background thread, a bounded number ahead of the engine loop."""

from __future__ import annotations

import queue
import threading
from typing import Callable, Generic, Iterator, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")
_END = object()
NOT_READY = object()
_PUT_WAIT = 0.1  # seconds between checks for close() while the queue is full


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
