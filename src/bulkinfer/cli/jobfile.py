"""TOML job files: the `run` settings as flat keys spelled like JobConfig's fields.

    model = "examples/demo-model"
    input = "examples/data/addition.jsonl"   # or a list of paths
    output = "demo-out"
    max_tokens = 8

Paths are taken as written, relative to the directory `bulkinfer run` is started in, the same as
flags. Flags given on the command line override the file's keys.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any

from bulkinfer.runner.config import JobConfig
from bulkinfer.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dependency is declared for 3.10 only
    import tomli as tomllib

# Settings of the command that are not settings of the job itself.
CLI_KEYS = {"hourly_cost": float, "format": str}


def known_keys() -> list[str]:
    return [spec.name for spec in dataclasses.fields(JobConfig)] + list(CLI_KEYS)


def read_job_file(path: Path) -> dict[str, Any]:
    """The file's settings, checked against the known keys and their types, ready to merge with flags."""
    if not path.is_file():
        raise UsageError(f"{path}: no such job file")
    try:
        settings = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a valid TOML job file ({exc})") from None
    unknown = sorted(set(settings) - set(known_keys()))
    if unknown:
        raise UsageError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"known keys: {', '.join(known_keys())}")
    hints = typing.get_type_hints(JobConfig)
    return {key: _checked(path, key, value, hints.get(key, CLI_KEYS.get(key))) for key, value in settings.items()}


def merge_settings(from_file: dict[str, Any], from_flags: dict[str, Any]) -> dict[str, Any]:
    """Flags that were given (not None, not empty) win over the file's keys."""
    given = {key: value for key, value in from_flags.items() if value not in (None, [])}
    return {**from_file, **given}


def _checked(path: Path, key: str, value: Any, hint: Any) -> Any:
    """The value in the form the flags would give it; a wrong type is the user's mistake, said in one line."""
    union = typing.get_origin(hint) in (typing.Union, getattr(types, "UnionType", None))
    kinds = {arg for arg in typing.get_args(hint) if arg is not type(None)} if union else {hint}
    if key == "param_columns" and isinstance(value, dict):
        value = [f"{param}={column}" for param, column in value.items()]  # as --param-column gives them
    if any(typing.get_origin(kind) in (list, dict) for kind in kinds):
        value = [value] if isinstance(value, str) else value  # `input = "x"` for a one-element list
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
        return _wrong(path, key, value, "a string or a list of strings")
    if bool in kinds:
        return value if isinstance(value, bool) else _wrong(path, key, value, "true or false")
    if isinstance(value, bool):  # TOML booleans are not numbers, whatever Python says
        return _wrong(path, key, value, _kind_name(kinds))
    if float in kinds and isinstance(value, (int, float)):
        return float(value)
    if any(isinstance(value, kind) for kind in kinds if isinstance(kind, type)):
        return value
    return _wrong(path, key, value, _kind_name(kinds))


def _kind_name(kinds: set[Any]) -> str:
    names = {int: "an integer", float: "a number", str: "a string"}
    return " or ".join(sorted(names.get(kind, str(kind)) for kind in kinds))


def _wrong(path: Path, key: str, value: Any, expected: str) -> Any:
    raise UsageError(f"{path}: {key} must be {expected}, got {value!r}")
