"""Turn the user's --input arguments (files, directories, globs) into an ordered list of input files."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from bulkinfer.errors import UsageError

COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".lz4")
FORMAT_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


@dataclass(frozen=True)
class Source:
    path: Path  # absolute
    format: str  # "parquet" | "jsonl"

    @property
    def name(self) -> str:
        return self.path.name


def resolve_sources(inputs: list[str], input_format: str | None = None) -> list[Source]:
    """Files in the order given; a directory or glob contributes its data files in sorted order.

    The order fixes each row's position, which is its identity across runs, so it must be stable.
    """
    sources: list[Source] = []
    for spec in inputs:
        for path in _expand(spec):
            sources.append(Source(path.resolve(), input_format or _format_of(path)))
    seen: set[Path] = set()
    for source in sources:
        if source.path in seen:
            raise UsageError(f"{source.path}: given twice as input; each row must be read once")
        seen.add(source.path)
    return sources


def _expand(spec: str) -> list[Path]:
    path = Path(spec).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and _is_data_file(p))
        if not found:
            raise UsageError(f"{spec}: directory holds no .parquet or .jsonl files")
        return found
    if glob.has_magic(spec):
        found = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not found:
            raise UsageError(f"{spec}: no file matches this pattern")
        return found
    raise UsageError(f"{spec}: no such file or directory")


def _is_data_file(path: Path) -> bool:
    hidden = any(part.startswith((".", "_")) for part in path.parts[-1:])
    return not hidden and _suffix_format(path) is not None


def _suffix_format(path: Path) -> str | None:
    name = path.name.lower()
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return FORMAT_SUFFIXES.get(Path(name).suffix)


def _format_of(path: Path) -> str:
    fmt = _suffix_format(path)
    if fmt is None:
        raise UsageError(f"{path}: cannot tell the format from the file name; pass --input-format parquet or jsonl")
    return fmt
