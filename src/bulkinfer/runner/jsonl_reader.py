"""Stream JSONL files (plain or compressed) one line at a time; a bad line becomes an error row."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import IO, Iterator

import pyarrow as pa

from bulkinfer.runner.rows import SourceRow, reserved_clash
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import Source

READ_BUFFER = 1 << 20


def open_lines(path: Path) -> IO[bytes]:
    """A binary line iterator; pyarrow picks the decompressor from the extension (.gz, .zst, ...)."""
    return io.BufferedReader(pa.input_stream(str(path), compression="detect"), READ_BUFFER)


def count_rows(path: Path) -> int:
    """Rows the file will yield: its non-blank lines, whatever they hold."""
    with open_lines(path) as lines:
        return sum(1 for raw in lines if raw.strip())


def read_jsonl(source: Source, start: int, done: RowSet, reserved: tuple[str, ...]) -> Iterator[SourceRow]:
    """Rows numbered from `start`, skipping those in `done` without parsing them; a row with a key
    in `reserved` (names the output needs) becomes an error row."""
    index = start
    with open_lines(source.path) as lines:
        for line_no, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            if index not in done:
                yield parse_line(raw, index, f"{source.name} line {line_no}", reserved)
            index += 1


def parse_line(raw: bytes, index: int, where: str, reserved: tuple[str, ...]) -> SourceRow:
    value, problem = _load_object(raw)
    if value is not None and (clash := reserved_clash(value.keys(), reserved)):
        value, problem = None, f"has a key {clash!r}, which is also an output column"
    return SourceRow(index, value, where, f"{where}: {problem}" if problem else None)


def _load_object(raw: bytes) -> tuple[dict | None, str | None]:
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        return None, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(value, dict):
        return None, f"expected a JSON object, got {_json_kind(value)}"
    return value, None


def sample_columns(path: Path, max_objects: int = 100) -> set[str] | None:
    """The keys seen in the first objects of the file; None when none of its first lines parses."""
    keys: set[str] = set()
    found = 0
    with open_lines(path) as lines:
        for raw in lines:
            if found >= max_objects:
                break
            value = _load_object(raw)[0] if raw.strip() else None
            if value is not None:
                keys.update(value)
                found += 1
    return keys if found else None


def _json_kind(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)
