"""Sampling settings for one request, with vLLM's names so that users can switch; declared once here."""

from __future__ import annotations

import functools
import json as json_module
from dataclasses import dataclass
from typing import ClassVar

from bulkinfer.settings import Setting, check_finite, check_seed, coerce, setting, settings_of

# The structured-output fields, vLLM's names; at most one may be set. See Constraint.
CONSTRAINTS = ("json", "json_object", "regex", "choice", "grammar")
# Temperatures below this are greedy, as in vLLM: dividing logits by less overflows float32, and the
# draw would come from NaNs.
GREEDY_BELOW = 1e-5
MAX_SCHEMA_DEPTH = 100  # the grammar library reads a schema about 125 levels deep at most


@dataclass
class SamplingParams:
    """Each field is also a job setting (flag and job-file key), a per-row param column, an lm-eval
    model_arg and an OpenAI batch body field, all derived from the declarations below."""

    HELP_PANEL: ClassVar[str] = "Sampling"

    n: int = setting(1, "Samples per prompt; above 1 a job's generation columns hold lists.")
    max_tokens: int = setting(16, "Most tokens to generate per sample.", job_default=256)
    temperature: float = setting(1.0, f"Sampling temperature; 0 (or anything below {GREEDY_BELOW:g}) is greedy.")
    top_p: float = setting(1.0, "Nucleus sampling: keep the likeliest tokens up to this total probability.")
    top_k: int = setting(-1, "Sample from the k likeliest tokens; -1 is off.")
    min_p: float = setting(0.0, "Drop tokens less likely than min_p times the likeliest one.")
    repetition_penalty: float = setting(1.0, "Divide the logits of tokens already in the prompt or output "
                                             "by this (multiply negative ones); 1 is off.")
    presence_penalty: float = setting(0.0, "Subtract this from the logits of tokens already generated.")
    frequency_penalty: float = setting(0.0, "Subtract this times its count from each generated token's logit.")
    seed: int | None = setting(None, "Seed, 64 bits: -2**63 to 2**64 - 1; a job gives row i the seed + i, "
                                     "so its results do not depend on batching (default: unseeded).")
    stop: list[str] | str | None = setting(None, "Stop string; repeatable.")
    stop_token_ids: list[int] = setting(help="Token id that ends a generation; repeatable.", factory=list)
    ignore_eos: bool = setting(False, "Keep generating past the end-of-sequence token.")
    logprobs: int | None = setting(None, "Record each generated token's logprob and this many alternatives, "
                                         "at most the model's vocabulary size (default: off).")
    prompt_logprobs: int | None = setting(None, "Record each prompt token's logprob and this many "
                                                "alternatives, at most the vocabulary size (default: off).")
    skip_special_tokens: bool = setting(True, "Leave special tokens out of the generated text.")
    # Structured outputs (at most one): the output is made to match.
    json: str | dict | None = setting(None, "JSON Schema the output must validate against: a file, or the schema "
                                            "as JSON text; per row, a schema object or its JSON text.",
                                      name="json_schema", path=True)
    json_object: bool = setting(False, "The output is a JSON object (any).")
    regex: str | None = setting(None, "Regular expression the whole output must match.")
    choice: list[str] | None = setting(None, "The output is exactly one of these strings; repeatable.",
                                       name="choices")
    grammar: str | None = setting(None, "Lark grammar (llguidance's dialect) or GBNF the output must match.")

    def __post_init__(self) -> None:
        self.stop_token_ids = self.stop_token_ids or []  # None too, as vLLM takes it
        self._coerce_types()  # first: a lone stop string becomes a one-item list, a tuple a list
        self.stop = [s for s in (self.stop or []) if s]
        self.choice = self.choice or None  # no choices given: no constraint
        check_finite(self)
        check_seed("seed", self.seed)
        self._validate()
        self._validate_constraint()

    def _coerce_types(self) -> None:
        """Each value as its declared type, so that a wrong one is refused here, by name, and not deep in the
        engine: 2.0 passes as the integer 2, 1 as the float 1.0; "hot" for temperature is a ValueError."""
        for declared in _declared():
            value = getattr(self, declared.field)
            if value is not None or not declared.optional:
                try:
                    setattr(self, declared.field, coerce(declared, value))
                except ValueError as exc:
                    raise ValueError(f"{declared.name} {exc}") from None

    def _validate(self) -> None:
        problems = []
        if self.n < 1:
            problems.append(f"n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            problems.append(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            problems.append(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            problems.append(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if not -2 <= self.presence_penalty <= 2:
            problems.append(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not -2 <= self.frequency_penalty <= 2:
            problems.append(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None and value < 0:
                problems.append(f"{name} must be >= 0, got {value}")
        if problems:
            raise ValueError("; ".join(problems))

    def _validate_constraint(self) -> None:
        given = [name for name in CONSTRAINTS if getattr(self, name) not in (None, False)]
        if len(given) > 1:
            raise ValueError(f"give at most one of {', '.join(CONSTRAINTS)}; got {', '.join(given)}")
        if self.json is not None:
            _check_schema(self.json)
        if self.choice is not None and not all(isinstance(c, str) and c for c in self.choice):
            raise ValueError("choices must be non-empty strings")

    @property
    def constraint(self) -> Constraint | None:
        """What the output must match, in a canonical form that serves as the grammar cache's key."""
        if self.json is not None:
            schema = json_module.loads(self.json) if isinstance(self.json, str) else self.json
            return Constraint("json", json_module.dumps(schema))  # key order kept: properties come out in it
        if self.json_object:
            return Constraint("json", '{"type": "object"}')
        if self.regex is not None:
            return Constraint("regex", self.regex)
        if self.choice is not None:
            return Constraint("choice", json_module.dumps(self.choice))
        if self.grammar is not None:
            return Constraint("grammar", self.grammar)
        return None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


@functools.cache
def _declared() -> tuple[Setting, ...]:
    return tuple(settings_of(SamplingParams))


def _check_schema(schema: str | dict) -> None:
    """Refuses what the constraint cannot even be written from: not JSON, not an object, or nested
    deeper than the grammar library reads (Python's JSON reader and writer recurse, and near their
    limit one row would stop the job)."""
    if not isinstance(schema, (str, dict)):
        raise ValueError(f"json_schema must be a dict or JSON text, got {type(schema).__name__}")
    too_deep = f"json_schema is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    if isinstance(schema, str):
        try:
            schema = json_module.loads(schema)
        except json_module.JSONDecodeError as exc:
            raise ValueError(f"json_schema is not valid JSON ({exc})") from None
        except RecursionError:
            raise ValueError(too_deep) from None
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"json_schema must be a JSON object, got {type(schema).__name__}")
    if _nested_deeper_than(schema, MAX_SCHEMA_DEPTH):
        raise ValueError(too_deep)
    try:
        json_module.dumps(schema)  # as the constraint is written
    except (TypeError, ValueError) as exc:  # a value JSON has no form for
        raise ValueError(f"json_schema is not JSON ({exc})") from None


def _nested_deeper_than(value: object, levels: int) -> bool:
    """Whether objects and arrays (or tuples, written as arrays) nest more than ``levels`` deep, found
    without recursion (a dict that contains itself nests without end)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > levels:
                return True
            stack.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))
    return False


@dataclass(frozen=True)
class Constraint:
    """kind: json (a JSON Schema's text), regex, choice (a JSON list of strings) or grammar (Lark or GBNF)."""

    kind: str
    text: str
