"""TOML job files: the `run` settings as flat keys, spelled like the flags with underscores.

    model = "examples/demo-model"
    input = "examples/data/addition.jsonl"   # or a list of paths
    output = "demo-out"
    max_tokens = 8

Paths are taken as written, relative to the directory `bulkinfer run` is started in, the same as
flags; a leading ~ is the user's home. Flags given on the command line override the file's keys.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from bulkinfer.errors import UsageError
from bulkinfer.settings import Setting, expand_paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dependency is declared for 3.10 only
    import tomli as tomllib


def read_job_file(path: Path, settings: list[Setting]) -> dict[str, Any]:
    """The file's settings, checked against the known ones and their types, ready to merge with flags."""
    return check_keys(str(path), load_toml(path), settings)


def load_toml(path: Path) -> dict[str, Any]:
    """The TOML file's tables and keys, unchecked; one line if it is not a TOML file."""
    if not path.is_file():
        raise UsageError(f"{path}: no such job file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a valid TOML job file ({exc})") from None


def check_keys(where: str, values: dict[str, Any], settings: list[Setting]) -> dict[str, Any]:
    """`values` (a job file's keys, or a table's: `where` names it) checked against the known settings and
    their types, with paths' leading ~ expanded."""
    by_name = {s.name: s for s in settings}
    for key in values:
        if key not in by_name:
            raise UsageError(f"{where}: unknown key {key}{_suggestion(key, list(by_name))}; "
                             f"`bulkinfer run --help` lists every setting")
    return expand_paths(settings, {key: _checked(where, by_name[key], value) for key, value in values.items()})


# Settings that take a JSON file or the JSON itself, by the character the JSON text starts with.
JSON_FILE_SETTINGS = {"json_schema": "{", "tools": "["}


def read_json_files(settings: dict[str, Any]) -> dict[str, Any]:
    """json_schema and tools given as a file's path (flag or key) become the file's text; inline JSON text
    or a TOML value stays as it is. The text is checked where the setting is (SamplingParams)."""
    read = {}
    for name, opener in JSON_FILE_SETTINGS.items():
        value = settings.get(name)
        if not isinstance(value, str) or value.lstrip().startswith(opener):
            continue
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"{name}: no such file {value} (give a JSON file, or the JSON text itself)")
        try:
            read[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{name}: {value} could not be read ({exc})") from None
    return {**settings, **read}


def merge_settings(from_file: dict[str, Any], from_flags: dict[str, Any]) -> dict[str, Any]:
    """Flags that were given (not None, not empty) win over the file's keys."""
    given = {key: value for key, value in from_flags.items() if value not in (None, [])}
    return {**from_file, **given}


def _suggestion(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _checked(where: str, setting: Setting, value: Any) -> Any:
    """The value in the form the flags would give it; a wrong type is the user's mistake, said in one line."""
    if setting.is_dict:
        if isinstance(value, dict) and all(isinstance(item, str) for item in value.values()):
            return value
        if isinstance(value, dict) and setting.kinds[0] != dict[str, str]:
            return value  # a typed mapping (logit_bias), checked by its dataclass
        return _wrong(where, setting.name, value, 'a table of strings, e.g. { max_tokens = "budget" }')
    if setting.is_list:
        item = setting.item_type
        value = [value] if _is(value, item) else value  # `input = "x"` for a one-element list
        if isinstance(value, list) and all(_is(element, item) for element in value):
            return [float(element) if item is float else element for element in value]
        return _wrong(where, setting.name, value, f"{_kind_name(item)} or a list of {_kind_name(item, plural=True)}")
    if setting.is_bool:
        return value if isinstance(value, bool) else _wrong(where, setting.name, value, "true or false")
    for kind in setting.kinds:
        if _is(value, kind):
            return float(value) if kind is float else value
    return _wrong(where, setting.name, value, " or ".join(_kind_name(kind) for kind in setting.kinds))


def _is(value: Any, kind: Any) -> bool:
    if isinstance(value, bool):  # TOML booleans are not numbers, whatever Python says
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(kind, type) and isinstance(value, kind)


def _kind_name(kind: Any, plural: bool = False) -> str:
    names = {int: ("an integer", "integers"), float: ("a number", "numbers"), str: ("a string", "strings"),
             bool: ("true or false", "booleans")}
    return names.get(kind, (str(kind), str(kind)))[plural]


def _wrong(where: str, key: str, value: Any, expected: str) -> Any:
    raise UsageError(f"{where}: {key} must be {expected}, got {value!r}")
