"""Each row's SamplingParams: the job's settings, the row's own values from param_columns, its seed."""

from __future__ import annotations

import dataclasses
from typing import Any

from bulkinfer.sampling_params import SamplingParams

_INT_FIELDS = {"n", "max_tokens", "top_k", "seed", "logprobs"}


class RowParams:
    def __init__(self, base: SamplingParams, param_columns: dict[str, str], job_seed: int | None) -> None:
        self.base = base
        self.param_columns = param_columns
        self.job_seed = job_seed

    def for_row(self, index: int, values: dict[str, Any]) -> SamplingParams:
        """Raises ValueError with a readable reason when a row's value is unusable."""
        overrides = {}
        for param, column in self.param_columns.items():
            value = values.get(column)
            if value is not None:
                overrides[param] = _coerce(param, column, value)
        if "seed" not in overrides and self.job_seed is not None:
            # Seeding per row makes a row's sample independent of which rows shared its batch.
            overrides["seed"] = self.job_seed + index
        if not overrides:
            return self.base
        try:
            return dataclasses.replace(self.base, **overrides)
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None


def _coerce(param: str, column: str, value: Any) -> Any:
    if param == "stop":
        if isinstance(value, str) or _is_str_list(value):
            return value
        wanted = "a string or a list of strings"
    elif param in _INT_FIELDS:
        if _is_int(value):
            return int(value)
        wanted = "an integer"
    else:  # config.SAMPLING_FIELDS holds nothing else, so this is a float setting
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        wanted = "a number"
    raise ValueError(f"column {column!r} ({param}) must hold {wanted}, got {value!r}")


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
