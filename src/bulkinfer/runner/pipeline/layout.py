"""A pipeline's output directory: one job directory per model stage, and the pipeline's record.

    OUTPUT/pipeline.json           the pipeline as last run: its input and every stage's keys
    OUTPUT/stages/01-generate/     a job's output directory (ledger, result files, its input table)
    OUTPUT/stages/02-reward/       ...

A pure transform stage has no directory: its output is computed from its input's whenever it is read.
`bulkinfer status` and `export` read pipeline.json to know the stages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bulkinfer.durable import write_atomic
from bulkinfer.errors import UsageError
from bulkinfer.runner.storage import is_remote

RECORD = "pipeline.json"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_stage_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise UsageError(f"stage name {name!r}: use letters, digits, _ . - (it names the stage's directory)")


def stage_dir(output: Path, index: int, name: str) -> Path:
    return output / "stages" / f"{index + 1:02d}-{name}"


def is_pipeline(output: Path | str) -> bool:
    """Whether `output` is a pipeline's directory (a local one: pipelines write only there)."""
    return not is_remote(str(output)) and (Path(output) / RECORD).is_file()


def take_output(output: Path) -> None:
    """A pipeline writes into a new or empty directory, or one of its own."""
    if output.exists() and not output.is_dir():
        raise UsageError(f"{output}: exists and is not a directory")
    if output.is_dir() and any(output.iterdir()) and not is_pipeline(output):
        raise UsageError(f"{output}: exists, is not empty and holds no bulkinfer pipeline; choose an empty or "
                         f"new output directory")
    output.mkdir(parents=True, exist_ok=True)


def write_record(output: Path, record: dict[str, Any]) -> None:
    write_atomic(output / RECORD, json.dumps(record, indent=1).encode())


def read_record(output: Path) -> dict[str, Any]:
    try:
        record = json.loads((output / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{output / RECORD}: cannot be read ({exc}); rerun the pipeline to write it again") from None
    if not isinstance(record, dict) or not isinstance(record.get("stages"), list):
        raise UsageError(f"{output / RECORD}: not a pipeline record; rerun the pipeline to write it again")
    return record
