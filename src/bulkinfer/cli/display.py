"""Progress of a running job: a live rich panel on a terminal, plain periodic lines anywhere else."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from bulkinfer.cli.metrics import Metrics, duration, metrics_of
from bulkinfer.runner.loop import Snapshot


class ProgressDisplay:
    """A runner Reporter that keeps the last snapshot, for the summary, and shows the job's progress.

    On a terminal it redraws a live panel a few times a second; otherwise (nohup, CI, a scheduler's
    log) it prints one plain line every `interval` seconds, with no escape codes.
    """

    def __init__(self, live: bool, interval: float = 30.0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.last: Snapshot | None = None
        self.interval = interval if not live else 0.25
        self.stream = stream = stream or sys.stderr  # stderr now, not as it was when this module was imported
        self.clock = clock
        self._next = clock() + self.interval
        self._live = Live(console=Console(file=stream), auto_refresh=False, transient=True) if live else None

    def __enter__(self) -> "ProgressDisplay":
        if self._live:
            self._live.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live:
            self._live.stop()

    def update(self, snapshot: Snapshot) -> None:
        self.last = snapshot
        # The runner calls this every engine step; drawing is kept to a few times a second at most.
        if self.clock() < self._next:
            return
        self._next = self.clock() + self.interval
        metrics = metrics_of(snapshot)
        if self._live:
            self._live.update(panel(metrics), refresh=True)
        else:
            print(progress_line(metrics), file=self.stream, flush=True)


def progress_line(m: Metrics) -> str:
    return (f"bulkinfer: {m.rows_done:,}/{m.rows_total:,} rows ({m.share_done:.1%}), {m.rows_failed:,} errors, "
            f"{m.output_tokens_per_second:,.0f} output tok/s, {m.prompt_tokens_per_second:,.0f} prompt tok/s, "
            f"batch {m.running}, KV cache {m.kv_cache_use:.0%}, {m.preemptions:,} preemptions, "
            f"prefix cache hits {m.prefix_cache_hit_rate:.0%}, ETA {duration(m.eta_seconds)}")


def panel(m: Metrics) -> Group:
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=max(m.rows_total, 1), completed=m.rows_done, width=40),
                f"{m.rows_done:,}/{m.rows_total:,} rows ({m.share_done:.1%})", f"ETA {duration(m.eta_seconds)}")
    figures = Table.grid(padding=(0, 3))
    figures.add_row(f"output {m.output_tokens_per_second:,.0f} tok/s",
                    f"prompt {m.prompt_tokens_per_second:,.0f} tok/s",
                    f"batch {m.running} running, {m.waiting} waiting")
    figures.add_row(f"KV cache {m.kv_cache_use:.0%}", f"preemptions {m.preemptions:,}",
                    f"prefix-cache hits {m.prefix_cache_hit_rate:.0%}")
    figures.add_row(f"[red]errors {m.rows_failed:,}[/red]" if m.rows_failed else "errors 0",
                    f"elapsed {duration(m.elapsed)}", "")
    return Group(bar, figures)
