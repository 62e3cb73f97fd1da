"""How far a job is, read from its output directory (safe while runs are writing it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bulkinfer.runner.union import load_union


@dataclass(frozen=True)
class JobStatus:
    rows_total: int
    rows_done: int
    rows_failed: int
    state: str  # "complete" | "running" | "interrupted"
    num_shards: int = 1
    missing_shards: list[int] = field(default_factory=list)  # never started
    unfinished_shards: list[int] = field(default_factory=list)  # started, not done

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        if self.num_shards == 1:  # a job run whole reads as it always has
            for key in ("num_shards", "missing_shards", "unfinished_shards"):
                del record[key]
        return record


def job_status(output: Path) -> JobStatus:
    union = load_union(output)
    if union.rows_done >= union.rows_total:
        state = "complete"
    elif any(part.running() for part in union.parts):
        state = "running"
    else:
        state = "interrupted"
    return JobStatus(union.rows_total, union.rows_done, union.rows_failed, state, union.num_shards,
                     union.missing, union.unfinished)
