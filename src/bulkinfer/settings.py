"""Settings are declared once, as dataclass fields with their default and help text.

EngineConfig (engine options), SamplingParams (sampling options) and JobConfig (the rest of a job)
declare their fields with `setting(...)`. Every other place a setting appears is derived from
those declarations through `settings_of`: the command line's flags and their help, job-file keys,
per-row param columns, lm-eval model_args, the OpenAI body mapping, bench and inspect.

This module imports nothing heavy, so `bulkinfer --help` can build every flag without torch.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Callable

_NO_DEFAULT = dataclasses.MISSING
# The seeds torch.Generator.manual_seed takes: 64 bits, a negative seed standing for 2**64 + seed.
SEED_MIN, SEED_MAX = -2**63, 2**64 - 1
# --help groups flags in these panels, in this order; a settings class names its usual one as HELP_PANEL.
PANELS = ("Input", "Model", "Sampling", "Output", "Performance")


def setting(default: Any = _NO_DEFAULT, help: str = "", *, factory: Callable[[], Any] | None = None,
            choices: tuple[str, ...] | None = None, name: str | None = None, job_default: Any = _NO_DEFAULT,
            flag: str | None = None, per_row: bool = True, path: bool = False, panel: str | None = None) -> Any:
    """A dataclass field that carries what the derived places need to know about it.

    name: the setting's name where one flat namespace holds every setting (flags, job-file keys,
    model_args), when the field's own name would clash there. job_default: a job's default, when it
    differs from the Python API's. flag: the flag's spelling, when it is not --field-name. per_row:
    False for a sampling option that cannot come from a param column. path: the value names a file or
    directory (a field typed Path is one without saying so), so a leading ~ in it is the user's home.
    panel: the --help panel (one of PANELS), when it is not the class's HELP_PANEL.
    """
    assert panel is None or panel in PANELS, panel  # a declaration mistake, not a user's
    metadata = {"help": help, "choices": choices, "name": name, "job_default": job_default, "flag": flag,
                "per_row": per_row, "path": path, "panel": panel}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Setting:
    """One declared field, as the derived places see it."""

    name: str  # in the flat namespace
    field: str  # on its dataclass
    owner: type
    hint: Any  # the field's type, with Optional kept
    default: Any  # a job's default; _NO_DEFAULT when the setting is required
    field_default: Any  # the dataclass's own default, for the Python API
    help: str
    choices: tuple[str, ...] | None
    flag: str | None
    per_row: bool
    names_path: bool
    panel: str | None  # None: typer's plain "Options"

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT

    @property
    def kinds(self) -> tuple[Any, ...]:
        """The types a value may have, None left out: (int,), (str,), (list[str], str), ..."""
        return tuple(non_none_args(self.hint))

    @property
    def optional(self) -> bool:
        return type(None) in typing.get_args(self.hint) or self.hint is type(None)

    @property
    def is_bool(self) -> bool:
        return self.kinds == (bool,)

    @property
    def is_list(self) -> bool:
        return any(typing.get_origin(kind) is list for kind in self.kinds)

    @property
    def is_dict(self) -> bool:
        return any(typing.get_origin(kind) is dict for kind in self.kinds)

    @property
    def is_path(self) -> bool:
        """Whether the value names a file or directory (or a list of them)."""
        return self.names_path or (isinstance(self.item_type, type) and issubclass(self.item_type, PurePath))

    @property
    def item_type(self) -> Any:
        """The element type of a list setting, the value type of anything else."""
        lists = [kind for kind in self.kinds if typing.get_origin(kind) is list]
        return typing.get_args(lists[0])[0] if lists else self.kinds[0]


def settings_of(cls: type) -> list[Setting]:
    """Every field of a settings dataclass, in declaration order, with its job default where set."""
    hints = typing.get_type_hints(cls)
    found = []
    for spec in dataclasses.fields(cls):
        if not spec.init or spec.metadata.get("group"):  # a group holds another class's settings
            continue
        meta = spec.metadata
        own = spec.default_factory() if spec.default_factory is not _NO_DEFAULT else spec.default
        default = meta.get("job_default", _NO_DEFAULT)
        found.append(Setting(meta.get("name") or spec.name, spec.name, cls, hints[spec.name],
                             own if default is _NO_DEFAULT else default, own, meta.get("help", ""),
                             meta.get("choices"), meta.get("flag"), meta.get("per_row", True),
                             meta.get("path", False), meta.get("panel") or getattr(cls, "HELP_PANEL", None)))
    return found


def expand_paths(settings: list[Setting], values: dict[str, Any]) -> dict[str, Any]:
    """`values` by setting name, with a leading ~ in each path setting's value made the user's home, as a
    shell does for an unquoted flag: `output = "~/runs/a"` in a job file means `--output ~/runs/a`."""
    paths = {s.name for s in settings if s.is_path}
    return {name: expand_home(value) if name in paths else value for name, value in values.items()}


def expand_home(value: Any) -> Any:
    """A path (str or Path), or a list of them, or a dict whose values are paths (lora's NAME -> PATH), with a
    leading ~ made the user's home; anything else as is."""
    if isinstance(value, list):
        return [expand_home(item) for item in value]
    if isinstance(value, dict):
        return {key: expand_home(item) for key, item in value.items()}
    if isinstance(value, PurePath):
        return value.expanduser()
    # Only a leading ~: inline JSON text (json_schema takes a file or the schema) never starts with one.
    return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value


def construct(cls: type, values: dict[str, Any], what: str) -> Any:
    """`cls(**values)`, where an unknown name is a ValueError that lists the known ones."""
    known = [spec.name for spec in dataclasses.fields(cls) if spec.init]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown {what}{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"known: {', '.join(known)}")
    return cls(**values)


def coerce(setting: Setting, value: Any) -> Any:
    """A value from typed data (a JSON column, lm-eval's parsed model_args) as the setting's type wants
    it: whole floats pass as integers, integers as floats, one item as a one-item list. Raises
    ValueError naming what was wanted."""
    for kind in setting.kinds:
        converted = _as(kind, value)
        if converted is _UNUSABLE and typing.get_origin(kind) is list:
            converted = _as(kind, [value])
        if converted is not _UNUSABLE:
            return converted
    raise ValueError(f"must be {' or '.join(_WANTED.get(kind, str(kind)) for kind in setting.kinds)}, got {value!r}")


_UNUSABLE = object()
_WANTED = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "an object",
           list: "a list", list[str]: "a list of strings", list[int]: "a list of integers",
           dict[int, float]: "an object of token ids to numbers"}


def _as(kind: Any, value: Any) -> Any:
    if kind is bool:
        return value if isinstance(value, bool) else _UNUSABLE
    if isinstance(value, bool):  # a boolean is not a number here, whatever Python says
        return _UNUSABLE
    if kind is int:  # numbers.*: numpy's scalars too, as Python callers may pass them
        if isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer()):
            return int(value)
        return _UNUSABLE
    if kind is float:
        return float(value) if isinstance(value, numbers.Real) else _UNUSABLE
    if kind is str:
        return value if isinstance(value, str) else _UNUSABLE
    if kind is dict:  # a JSON object, from a struct column or a JSON line
        return value if isinstance(value, dict) else _UNUSABLE
    if kind is list:  # a JSON array, as it came
        return list(value) if isinstance(value, (list, tuple)) else _UNUSABLE
    if typing.get_origin(kind) is dict and isinstance(value, dict):
        return _as_mapping(kind, value)
    if typing.get_origin(kind) is list and isinstance(value, (list, tuple)):
        items = [_as(typing.get_args(kind)[0], item) for item in value]
        return _UNUSABLE if _UNUSABLE in items else items
    return _UNUSABLE


def _as_mapping(kind: Any, value: dict) -> Any:
    """A typed mapping such as dict[int, float]. Its keys may be text, as JSON objects and Parquet structs
    write every key, and its values too, as TOKEN=VALUE flags give them: "42" is the integer 42 here."""
    key_kind, value_kind = typing.get_args(kind)
    items = [(_as(key_kind, _number_in(key)), _as(value_kind, _number_in(item))) for key, item in value.items()]
    return _UNUSABLE if any(_UNUSABLE in pair for pair in items) else dict(items)


def _number_in(value: Any) -> Any:
    """The number a text spells, if it spells one (an integer first: "42" is 42, not 42.0); else the value."""
    if not isinstance(value, str):
        return value
    for number in (int, float):
        try:
            return number(value)
        except ValueError:
            pass
    return value


def non_none_args(hint: Any) -> list[Any]:
    """The members of a union other than None; a plain type alone."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return [arg for arg in typing.get_args(hint) if arg is not type(None)] if union else [hint]


def check_choice(name: str, value: Any, choices: tuple[str, ...] | None) -> None:
    if choices is not None and value is not None and value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def check_choices(instance: Any) -> None:
    """Raises ValueError for the first field whose value is not one of its declared choices."""
    for spec in dataclasses.fields(instance):
        check_choice(spec.name, getattr(instance, spec.name), spec.metadata.get("choices"))


def check_finite(instance: Any) -> None:
    """Raises ValueError for the first number field holding NaN or an infinity, which every range check
    would otherwise let through (NaN compares false with everything)."""
    for spec in dataclasses.fields(instance):
        value = getattr(instance, spec.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{spec.metadata.get('name') or spec.name} must be a finite number, got {value}")


def check_seed(name: str, value: int | None) -> None:
    if value is not None and not SEED_MIN <= value <= SEED_MAX:
        raise ValueError(f"{name} must be in [-2**63, 2**64 - 1] (64 bits), got {value}")
