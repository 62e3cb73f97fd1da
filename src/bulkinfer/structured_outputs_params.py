"""vLLM's way of asking for structured output, ``SamplingParams(structured_outputs=StructuredOutputsParams(...))``
(and its older ``guided_decoding=GuidedDecodingParams(...)``), so that vLLM code runs unchanged. Python-only:
the values land on SamplingParams' own constraint fields, which are what jobs, flags and columns use."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class StructuredOutputsParams:
    """What the output must match; give one field (the checks are SamplingParams', by the same names)."""

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None

    def given(self) -> dict[str, Any]:
        """The fields set, by SamplingParams' field names."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self)
                if getattr(self, spec.name) not in (None, False)}


@dataclass
class GuidedDecodingParams(StructuredOutputsParams):
    """vLLM's earlier name for StructuredOutputsParams, for code written before the rename."""


def constraint_fields(structured_outputs: StructuredOutputsParams | None,
                      guided_decoding: StructuredOutputsParams | None) -> dict[str, Any]:
    """The SamplingParams constraint fields that the two wrappers ask for; ValueError if both are given."""
    if structured_outputs is not None and guided_decoding is not None:
        raise ValueError("give structured_outputs or guided_decoding, not both")
    wrapper = structured_outputs if structured_outputs is not None else guided_decoding
    if wrapper is None:
        return {}
    if not isinstance(wrapper, StructuredOutputsParams):
        raise ValueError(f"structured_outputs must be a StructuredOutputsParams, got {type(wrapper).__name__}")
    return wrapper.given()
