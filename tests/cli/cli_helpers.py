"""Helpers shared by the command-line tests: run `bulkinfer` in-process, read results, paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bulkinfer.cli import main

REPO = Path(__file__).resolve().parents[2]
DEMO_MODEL = REPO / "examples" / "demo-model"


def invoke(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `bulkinfer ARGV`."""
    with pytest.raises(SystemExit) as exited:
        main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def exported(capsys: pytest.CaptureFixture, output: Path) -> list[dict[str, Any]]:
    """The rows of a finished job, in input order, through `bulkinfer export`."""
    file = output.parent / f"{output.name}.jsonl"
    code, _, err = invoke(capsys, "export", output, file)
    assert code == 0, err
    return [json.loads(line) for line in file.read_text().splitlines()]


def one_line_error(code: int, err: str) -> str:
    assert code == 2 and err.count("\n") == 1 and err.startswith("bulkinfer: error: "), (code, err)
    return err
