"""How a running job tells the world how far it is: a snapshot per engine step, to a Reporter.

The displays themselves (a live panel, plain log lines) are the CLI's: bulkinfer.cli.display."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
