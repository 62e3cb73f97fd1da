"""Command-line options built from setting declarations (see bulkinfer.settings), one per setting.

Flags are spelled like the settings (`max_tokens` -> `--max-tokens`), booleans get a `--no-` form,
every flag defaults to "not given" (None) and shows the declared default in --help; so settings
from several places (flags over a job file over the defaults) merge by dropping what was not given.
--help groups the flags in their settings' panels (settings.PANELS), the required ones first.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Optional

import typer

from bulkinfer.errors import UsageError
from bulkinfer.settings import PANELS, Setting, check_choices, expand_paths, settings_of


def option_parameters(settings: list[Setting]) -> list[inspect.Parameter]:
    """Keyword parameters for a typer command, one option per setting, in --help's order: typer shows a
    panel where its first option comes."""
    ordered = sorted(settings, key=lambda s: (PANELS.index(s.panel) if s.panel else -1, not s.required))
    return [inspect.Parameter(s.name, inspect.Parameter.KEYWORD_ONLY, default=_option(s), annotation=_cli_type(s))
            for s in ordered]


def with_options(command: Callable[..., int], settings: list[Setting]) -> Callable[..., int]:
    """``command`` taking one more option per setting after its own parameters (its ``**options``):
    typer reads a command's options from its signature."""
    own = [p for p in inspect.signature(command).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = inspect.Signature([*own, *option_parameters(settings)],  # type: ignore[attr-defined]
                                              return_annotation=int)
    command.__annotations__ = {p.name: p.annotation for p in command.__signature__.parameters.values()}
    return command


def given_options(options: dict[str, Any], settings: list[Setting]) -> dict[str, Any]:
    """The options that were given, in the settings' own forms (PARAM=COLUMN pairs become a dict, a
    leading ~ in a path the user's home)."""
    kinds = {s.name: s for s in settings}
    given = {name: value for name, value in options.items() if value not in (None, [])}
    for name, value in given.items():
        if name in kinds and kinds[name].is_dict:
            given[name] = parse_pairs(kinds[name], value)
    return expand_paths(settings, given)


def take_settings(cls: type, values: dict[str, Any]) -> Any:
    """An instance of a settings dataclass from the values that are its own, which leave `values`."""
    own = {s.field: values.pop(s.name) for s in settings_of(cls) if s.name in values}
    try:
        instance = cls(**own)
        check_choices(instance)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return instance


def parse_pairs(setting: Setting, pairs: list[str]) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            example = ", e.g. max_tokens=budget" if _metavar(setting) == "PARAM=COLUMN" else ""
            raise UsageError(f"{flag_of(setting)} {pair!r}: expected {_metavar(setting)}{example}")
        parsed[key.strip()] = value.strip()
    return parsed


def flag_of(setting: Setting) -> str:
    return "--" + (setting.flag or setting.name.replace("_", "-"))


def with_defaults(setting: Setting, **changes: Any) -> Setting:
    """The same setting with another default or help, for a command where it means something else."""
    return dataclasses.replace(setting, **changes)


def _option(setting: Setting) -> Any:
    # The default goes into the help text: typer would show a default only for a real one, and the
    # option's real default must be None to tell "not given" apart.
    help_text = setting.help
    if setting.required:
        help_text += " (required: here or in the job file)"
    elif setting.default not in (None, [], {}) and "(default:" not in help_text:
        shown = str(setting.default).lower() if isinstance(setting.default, bool) else setting.default
        help_text += f" (default: {shown})"
    flag = flag_of(setting)
    shown = {"help": help_text, "show_default": False, "rich_help_panel": setting.panel}
    if setting.is_bool:
        return typer.Option(None, f"{flag}/--no-{flag.removeprefix('--')}", **shown)
    return typer.Option(None, flag, metavar=_metavar(setting), **shown)


def _metavar(setting: Setting) -> str:
    if setting.choices:
        return "[" + "|".join(setting.choices) + "]"
    if setting.is_dict:  # param_columns names columns, lora paths; a typed mapping (logit_bias) takes values
        if setting.kinds[0] != dict[str, str]:
            return "KEY=VALUE"
        return "NAME=PATH" if setting.is_path else "PARAM=COLUMN"
    return _METAVARS.get(setting.item_type, "TEXT")


_METAVARS = {int: "INTEGER", float: "NUMBER", str: "TEXT"}


def _cli_type(setting: Setting) -> Any:
    if setting.is_dict:
        return Optional[list[str]]
    if setting.is_list:
        return Optional[list[setting.item_type]]
    return Optional[setting.kinds[0]]
