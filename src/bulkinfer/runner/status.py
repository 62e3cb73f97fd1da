"""How far a job is, read from its output directory (safe while a run is writing it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bulkinfer.runner.jobdir import JobDir
from bulkinfer.runner.lock import current_holder
from bulkinfer.runner.progress import load_progress


@dataclass(frozen=True)
class JobStatus:
    rows_total: int
    rows_done: int
    rows_failed: int
    state: str  # "complete" | "running" | "interrupted"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def job_status(output: Path) -> JobStatus:
    directory = JobDir(output)
    directory.require_job()
    rows_total = directory.read_manifest()["rows_total"]
    progress = load_progress(directory.ledger_path)
    if progress.rows_done >= rows_total:
        state = "complete"
    elif current_holder(directory.lock_path) is not None:
        state = "running"
    else:
        state = "interrupted"
    return JobStatus(rows_total, progress.rows_done, progress.rows_failed, state)
