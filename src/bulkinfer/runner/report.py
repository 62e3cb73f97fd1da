"""How a running job tells the world how far it is: a snapshot, and a plain log-line reporter."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol, TextIO


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


class LogReporter:
    """One line every `interval` seconds: for logs, schedulers and anything that is not a terminal."""

    def __init__(self, interval: float = 30.0, stream: TextIO = sys.stderr,
                 clock: Any = time.monotonic) -> None:
        self.interval = interval
        self.stream = stream
        self.clock = clock
        self._last = clock()

    def update(self, snapshot: Snapshot) -> None:
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        print(progress_line(snapshot), file=self.stream, flush=True)


def progress_line(snapshot: Snapshot) -> str:
    done_here = snapshot.rows_done - snapshot.rows_at_start
    rate = done_here / snapshot.elapsed if snapshot.elapsed > 0 else 0.0
    left = snapshot.rows_total - snapshot.rows_done
    eta = f", ETA {_duration(left / rate)}" if rate > 0 else ""
    share = 100.0 * snapshot.rows_done / snapshot.rows_total if snapshot.rows_total else 100.0
    return (f"bulkinfer: {snapshot.rows_done:,}/{snapshot.rows_total:,} rows ({share:.1f}%), "
            f"{snapshot.rows_failed:,} errors, {rate:.1f} rows/s{eta}")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
