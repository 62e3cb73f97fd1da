"""Sampling settings for one request, with vLLM's names so that users can switch; declared once here."""

from __future__ import annotations

import functools
import json as json_module
import math
from dataclasses import InitVar, dataclass
from typing import ClassVar

from bulkinfer.settings import Setting, check_choices, check_finite, check_seed, coerce, setting, settings_of
from bulkinfer.structured_outputs_params import GuidedDecodingParams, StructuredOutputsParams, constraint_fields
from bulkinfer.tool_params import check_tool_choice, forced_functions, parsed_tool_choice, parsed_tools

# The structured-output fields, vLLM's names; at most one may be set. See Constraint.
CONSTRAINTS = ("json", "json_object", "regex", "choice", "grammar")
# Temperatures below this are greedy, as in vLLM: dividing logits by less overflows float32, and the
# draw would come from NaNs.
GREEDY_BELOW = 1e-5
MAX_SCHEMA_DEPTH = 100  # the grammar library reads a schema about 125 levels deep at most
REASONING_EFFORTS = ("low", "medium", "high")  # OpenAI's reasoning_effort values


@dataclass
class SamplingParams:
    """Each field is also a job setting (flag and job-file key), a per-row param column, an lm-eval
    model_arg and an OpenAI batch body field, all derived from the declarations below."""

    HELP_PANEL: ClassVar[str] = "Sampling"

    n: int = setting(1, "Samples per prompt; above 1 a job's generation columns hold lists.")
    best_of: int | None = setting(None, "vLLM's best_of: accepted when it equals n (vLLM V1 generates n "
                                        "samples and ranks none), refused otherwise.")
    max_tokens: int = setting(16, "Most tokens to generate per sample.", job_default=256)
    min_tokens: int = setting(0, "Fewest tokens to generate per sample: until then neither end-of-sequence, "
                                 "stop_token_ids nor stop strings end it.")
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
    include_stop_str_in_output: bool = setting(False, "Keep the stop string that ended a sample in its text.")
    ignore_eos: bool = setting(False, "Keep generating past the end-of-sequence token.")
    logit_bias: dict[int, float] | None = setting(None, "TOKEN_ID=BIAS: add BIAS to that token's logit before "
                                                        "sampling (+100 forces it, -100 bans it); repeatable.")
    bad_words: list[str] | None = setting(None, "A word never generated: the last token of its spelling is "
                                                "banned wherever the tokens before it were just generated; "
                                                "repeatable.")
    truncate_prompt_tokens: int | None = setting(None, "Keep only the prompt's last k tokens; -1 keeps the last "
                                                       "max_model_len (default: the whole prompt).")
    logprobs: int | None = setting(None, "Record each generated token's logprob and this many alternatives, "
                                         "at most the model's vocabulary size (default: off).")
    prompt_logprobs: int | None = setting(None, "Record each prompt token's logprob and this many "
                                                "alternatives, at most the vocabulary size (default: off).")
    skip_special_tokens: bool = setting(True, "Leave special tokens out of the generated text.")
    # Thinking models.
    thinking_budget: int | None = setting(None, "Most reasoning tokens per sample of a thinking model: then the "
                                                "engine closes the reasoning and the answer follows; max_tokens "
                                                "still caps both (default: no limit; needs a reasoning parser).")
    reasoning_effort: str | None = setting(None, "How long a thinking model reasons: low, medium or high. gpt-oss "
                                                 "reads it in its system message; for other families it sets "
                                                 "thinking_budget when that is unset (see docs/reasoning.md).",
                                           choices=REASONING_EFFORTS)
    # Structured outputs (at most one): the output is made to match.
    json: str | dict | None = setting(None, "JSON Schema the output must validate against: a file, or the schema "
                                            "as JSON text; per row, a schema object or its JSON text.",
                                      name="json_schema", path=True)
    json_object: bool = setting(False, "The output is a JSON object (any).")
    regex: str | None = setting(None, "Regular expression the whole output must match.")
    choice: list[str] | None = setting(None, "The output is exactly one of these strings; repeatable.",
                                       name="choices")
    grammar: str | None = setting(None, "Lark grammar (llguidance's dialect) or GBNF the output must match.")
    # Tools (OpenAI's): rendered into chat prompts by the chat template, and the calls read out of the output.
    tools: str | list | None = setting(None, "OpenAI tool definitions ([{\"type\": \"function\", \"function\": "
                                             "{name, description, parameters}}]) for the chat template, whose calls "
                                             "are parsed out of the output: a JSON file, or the list as JSON text; "
                                             "per row, a list or its JSON text.", path=True)
    tool_choice: str | dict | None = setting(None, "none, auto, required, or a function the model must call as "
                                                   "JSON ({\"type\": \"function\", \"function\": {\"name\": "
                                                   "...}}); required and a named function are enforced by a grammar "
                                                   "(default: auto).")
    # vLLM's wrappers of the five fields above, for Python callers only: init arguments, not fields, so they
    # are no settings; what they ask for is set on the fields above (read those; these read back as None,
    # which keeps dataclasses.replace from applying them twice).
    structured_outputs: InitVar[StructuredOutputsParams | None] = None
    guided_decoding: InitVar[GuidedDecodingParams | None] = None

    def __post_init__(self, structured_outputs: StructuredOutputsParams | None = None,
                      guided_decoding: GuidedDecodingParams | None = None) -> None:
        self._unwrap_constraint(structured_outputs, guided_decoding)
        self.stop_token_ids = self.stop_token_ids or []  # None too, as vLLM takes it
        self._coerce_types()  # first: a lone stop string becomes a one-item list, a tuple a list
        self.stop = [s for s in (self.stop or []) if s]
        self.choice = self.choice or None  # no choices given: no constraint
        self.logit_bias = self.logit_bias or None
        self.bad_words = [word for word in (self.bad_words or []) if word.strip()] or None
        check_finite(self)
        check_choices(self)
        check_seed("seed", self.seed)
        self._validate()
        self._validate_constraint()
        self.tool_choice = parsed_tool_choice(self.tool_choice)
        if self.tools is not None:  # else they may come with the conversation (LLM.chat's tools)
            check_tool_choice(self.tool_definitions, self.tool_choice)
        if self.tools is not None and self.forced_tools is not None and self.constraint is not None:
            given = ", ".join(name for name in CONSTRAINTS if getattr(self, name) not in (None, False))
            raise ValueError(f"tool_choice required or a named function is a constraint of its own: give it "
                             f"without {given}")

    def _unwrap_constraint(self, structured_outputs: StructuredOutputsParams | None,
                           guided_decoding: GuidedDecodingParams | None) -> None:
        for name, value in constraint_fields(structured_outputs, guided_decoding).items():
            if getattr(self, name) not in (None, False):
                raise ValueError(f"{name} is given both on SamplingParams and in its structured_outputs")
            setattr(self, name, value)

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
        if self.best_of is not None and self.best_of != self.n:
            problems.append(f"best_of must equal n ({self.n}) or be unset, got {self.best_of}: like vLLM V1, "
                            "bulkinfer does not generate extra samples to rank")
        if self.max_tokens < 1:
            problems.append(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= max(self.max_tokens, 0):  # a bad max_tokens is its own problem
            problems.append(f"min_tokens must be in [0, max_tokens ({self.max_tokens})], got {self.min_tokens}")
        if self.truncate_prompt_tokens is not None and not (self.truncate_prompt_tokens >= 1
                                                            or self.truncate_prompt_tokens == -1):
            problems.append(f"truncate_prompt_tokens must be >= 1 or -1, got {self.truncate_prompt_tokens}")
        problems += _logit_bias_problems(self.logit_bias or {})
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
        for name in ("logprobs", "prompt_logprobs", "thinking_budget"):
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
    def tool_definitions(self) -> list[dict] | None:
        """The tools as a list (they may be given as its JSON text), checked; None for none."""
        return parsed_tools(self.tools)

    @property
    def forced_tools(self) -> list[dict] | None:
        """The functions one of which must be called (tool_choice required or named), or None."""
        return forced_functions(self.tool_definitions, self.tool_choice)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def template_variables(self) -> dict[str, str]:
        """What these settings tell the chat template (see template_variables below)."""
        return template_variables(self.reasoning_effort)

    def kept_prompt(self, token_ids: list[int], max_model_len: int) -> list[int]:
        """The prompt tokens that run: the last truncate_prompt_tokens of them (-1: max_model_len), or all."""
        keep = self.truncate_prompt_tokens
        if keep is None:
            return token_ids
        return token_ids[-(max_model_len if keep == -1 else keep):]


def template_variables(reasoning_effort: str | None) -> dict[str, str]:
    """The chat template's variables a request's settings give: gpt-oss's template writes reasoning_effort into
    its system message (other templates ignore the variable)."""
    return {"reasoning_effort": reasoning_effort} if reasoning_effort is not None else {}


def _logit_bias_problems(bias: dict[int, float]) -> list[str]:
    """Token ids below 0 and biases that are not finite numbers; ids past the vocabulary are the model's
    to refuse (see engine/request.py params_refusal)."""
    problems = [f"logit_bias token id must be >= 0, got {token}" for token in bias if token < 0]
    problems += [f"logit_bias of token {token} must be a finite number, got {value}"
                 for token, value in bias.items() if not math.isfinite(value)]
    return problems[:1]


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
