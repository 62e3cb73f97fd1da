"""Which files a job reads: the user's --input arguments (files, directories, globs, on this machine or
on object storage) become an ordered list of files, each checked for the columns the job needs before
the model loads. On a store, a prefix is a directory: every data file under it.

The order fixes each row's position, its identity across runs, so it must be stable.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from bulkinfer.errors import UsageError
from bulkinfer.runner.columns import reserved_clash
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.readers import InputFile, Source, columns_of, count_rows
from bulkinfer.runner.storage import filesystem_for, is_remote, object_identity, store_errors
from bulkinfer.runner.tasks import input_columns, reserved_columns

COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd", ".bz2", ".lz4")


FORMAT_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


def resolve_sources(inputs: list[str], input_format: str | None = None,
                    storage_options: dict[str, Any] | None = None) -> list[Source]:
    """Files in the order given; a directory, prefix or glob contributes its data files in sorted order."""
    sources = [Source(path, input_format or _format_of(path), storage_options)
               for spec in inputs for path in _expand(spec, storage_options)]
    seen: set[str] = set()
    for source in sources:
        if source.path in seen:
            raise UsageError(f"{source.path}: given twice as input; each row must be read once")
        seen.add(source.path)
    return sources


def identity_of(source: Source) -> dict[str, Any]:
    """What says a file is unchanged: path, format, size, and its modification time, or on a store the
    object's version (an ETag or generation: a store's modification time is that of the upload)."""
    if is_remote(source.path):
        found = object_identity(source.path, source.storage_options)
        if found is None:
            raise UsageError(f"{source.path}: no such object")
        return {"path": source.path, "format": source.format, "size": found[0], "version": found[1]}
    stat = Path(source.path).stat()
    return {"path": source.path, "format": source.format, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def scan_inputs(sources: list[Source]) -> list[InputFile]:
    """Stat and count every file; counting a JSONL file reads it once, which is cheap next to inference."""
    return [InputFile(**identity_of(source), rows=count_rows(source), storage_options=source.storage_options)
            for source in sources]


def check_columns(sources: list[Source], config: JobConfig) -> None:
    """Refuse, before the model loads, a job whose columns are not in its input. Parquet: the schema.
    JSONL: the keys of its first objects (a later row lacking one becomes an error row)."""
    reserved = reserved_columns(config.task)
    for source in sources:
        present = columns_of(source)
        if present is None:
            continue  # no line parses at the top of the file: each bad line will get its error row
        for setting, column in input_columns(config):
            if column not in present:
                raise UsageError(f"{source.name}: no column {column!r} (from {setting}); "
                                 f"its columns are: {', '.join(sorted(present)) or 'none'}")
        clash = reserved_clash(present, reserved)
        if clash:
            raise UsageError(f"{source.name}: column {clash!r} has the name of an output column; "
                             f"rename it in the input")


def suffix_format(name: str) -> str | None:
    """The format a file name says, a compression suffix aside: "parquet", "jsonl" or None."""
    name = name.lower()
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return FORMAT_SUFFIXES.get(Path(name).suffix)


def _expand(spec: str, storage_options: dict[str, Any] | None) -> list[str]:
    if is_remote(spec):
        return _expand_remote(spec, storage_options)
    path = Path(spec).expanduser()
    if path.is_file():
        return [str(path.resolve())]
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if p.is_file() and _is_data_file(p.name))
        if not found:
            raise UsageError(f"{spec}: directory holds no .parquet or .jsonl files")
        return [str(p.resolve()) for p in found]
    if glob.has_magic(spec):
        found = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not found:
            raise UsageError(f"{spec}: no file matches this pattern")
        return [str(p.resolve()) for p in found]
    raise UsageError(f"{spec}: no such file or directory")


def _expand_remote(spec: str, storage_options: dict[str, Any] | None) -> list[str]:
    """The objects `spec` names, as URLs: one object, every data file under a prefix, or a glob's matches."""
    fs, path = filesystem_for(spec, storage_options)
    with store_errors(spec):
        if glob.has_magic(path):
            found = [name for name, info in fs.glob(path, detail=True).items() if info["type"] == "file"]
            if not found:
                raise UsageError(f"{spec}: no object matches this pattern")
        elif fs.isfile(path):
            found = [path]
        else:
            found = [name for name in fs.find(path) if _is_data_file(name.rsplit("/", 1)[-1])]
            if not found:
                raise UsageError(f"{spec}: no such object, and no .parquet or .jsonl objects under this prefix")
    return [fs.unstrip_protocol(name) for name in sorted(found)]


def _is_data_file(name: str) -> bool:
    hidden = name.startswith((".", "_"))
    return not hidden and suffix_format(name) is not None


def _format_of(path: str) -> str:
    fmt = suffix_format(path.rsplit("/", 1)[-1])
    if fmt is None:
        raise UsageError(f"{path}: cannot tell the format from the file name; pass --input-format parquet or jsonl")
    return fmt
