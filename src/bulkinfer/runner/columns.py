"""Refuse, before the model loads, a job whose columns are not in its input."""

from __future__ import annotations

from bulkinfer.runner import jsonl_reader, parquet_reader
from bulkinfer.runner.config import JobConfig
from bulkinfer.errors import UsageError
from bulkinfer.runner.rows import reserved_clash, reserved_columns
from bulkinfer.runner.sources import Source


def required_columns(config: JobConfig) -> list[tuple[str, str]]:
    """(setting, column) pairs that every input must have."""
    needed = _text_columns(config)
    if config.id_column:
        needed.append(("id_column", config.id_column))
    needed += [(f"param_columns.{param}", column) for param, column in config.param_columns.items()]
    return needed


def _text_columns(config: JobConfig) -> list[tuple[str, str]]:
    if config.task == "score":
        return [("context_column", config.context_column), ("continuation_column", config.continuation_column)]
    if config.task == "choice":
        return [("prompt_column", config.prompt_column), ("choices_column", config.choices_column)]
    if config.messages_column:
        return [("messages_column", config.messages_column)]
    return [("prompt_column", config.prompt_column)]


def check_columns(sources: list[Source], config: JobConfig) -> None:
    """Parquet: the schema. JSONL: the keys of its first objects (a later row lacking one becomes an error row)."""
    reserved = reserved_columns(config.task)
    for source in sources:
        present = _columns_of(source)
        if present is None:
            continue  # no line parses at the top of the file: each bad line will get its error row
        for setting, column in required_columns(config):
            if column not in present:
                raise UsageError(f"{source.name}: no column {column!r} (from {setting}); "
                                 f"its columns are: {', '.join(sorted(present)) or 'none'}")
        clash = reserved_clash(present, reserved)
        if clash:
            raise UsageError(f"{source.name}: column {clash!r} has the name of an output column; "
                             f"rename it in the input")


def _columns_of(source: Source) -> set[str] | None:
    if source.format == "parquet":
        return set(parquet_reader.columns(source.path))
    return jsonl_reader.sample_columns(source.path)
