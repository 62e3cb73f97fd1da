"""Prompt lengths as the runner's power-of-two length bins, drawn as a bar chart in the terminal."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rich.table import Table

from bulkinfer.runner.bins import length_bin

BAR_WIDTH = 40


@dataclass(frozen=True)
class LengthBin:
    low: int  # shortest length in the bin
    high: int  # longest
    rows: int


def length_bins(lengths: list[int]) -> list[LengthBin]:
    """Every bin from the shortest to the longest prompt, empty ones included, so gaps show."""
    counts = Counter(length_bin(length) for length in lengths)
    if not counts:
        return []
    return [LengthBin(_low(b), 2 ** b - 1 if b else 0, counts.get(b, 0))
            for b in range(min(counts), max(counts) + 1)]


def histogram_table(bins: list[LengthBin], unit: str) -> Table:
    table = Table(title=f"prompt length ({unit})", title_justify="left", box=None, padding=(0, 1))
    table.add_column("bin", justify="right")
    table.add_column("rows", justify="right")
    table.add_column("")
    most = max((b.rows for b in bins), default=0)
    for b in bins:
        bar = "█" * round(BAR_WIDTH * b.rows / most) if most else ""
        table.add_row(f"{b.low:,}-{b.high:,}" if b.high > b.low else f"{b.low:,}", f"{b.rows:,}", bar)
    return table


def _low(bin_number: int) -> int:
    return 2 ** (bin_number - 1) if bin_number else 0
