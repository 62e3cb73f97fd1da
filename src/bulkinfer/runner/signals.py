"""Ctrl-C and SIGTERM: the first asks the job to stop cleanly, a second one exits at once.

Exiting at once is safe: anything not yet in the ledger is redone on resume, and a half-written
result file or ledger line is cleaned up then.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType, TracebackType

HANDLED = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.received is not None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self  # Python lets only the main thread handle signals; a job run elsewhere has no Ctrl-C stop
        for signum in HANDLED:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, kind: type | None, value: BaseException | None, tb: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            _say("bulkinfer: second signal, exiting now; committed results are safe\n")
            os._exit(128 + signum)
        self.received = signum
        _say("bulkinfer: stopping: committing finished rows (send the signal again to exit at once)\n")


def _say(message: str) -> None:
    # os.write, not print: the handler may run while the main thread is inside a write to stderr.
    os.write(2, message.encode())
