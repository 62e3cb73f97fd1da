"""Preparing requests: a window of input rows becomes token ids and sampling settings for the engine,
or error rows, and is put in the order the engine should see it.

That order is by power-of-two length bin, with shared prefixes side by side. Rows of similar length
finish at similar times, so the running batch turns over evenly; rows that share a prefix (a system
prompt, few-shot examples) run close together, while their prefix blocks are still in the engine's
prefix cache. Output order is restored by export, so this order is free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Protocol, Sequence, TypeVar

from bulkinfer.engine.scoring import encode_pair
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import PromptRenderer, RowSettings
from bulkinfer.runner.readers import SourceRow
from bulkinfer.sampling_params import SamplingParams

Item = TypeVar("Item")
# No tokenizer averages more than this many characters per token on real text, so a prompt longer than
# this times max_model_len cannot fit and is refused before it is tokenized.
CHARS_PER_TOKEN = 16


@dataclass
class Work:
    row: SourceRow
    token_ids: list[int]
    params: SamplingParams | None  # None for a scoring request
    score_from: int | None = None  # set: a prefill-only request scoring the tokens from here on
    part: int = 0  # a row may fan out into several requests (one per choice); this one's number
    parts: int = 1
    request_id: Hashable = None  # None: the row's index

    def __post_init__(self) -> None:
        if self.request_id is None:
            self.request_id = self.row.index


@dataclass
class Failure:
    row: SourceRow
    error: str
    prompt_tokens: int | None = None


@dataclass
class PreparedWindow:
    work: list[Work]  # in the order to hand to the engine
    failures: list[Failure]


class RequestPreparer(Protocol):
    """Turns a window of rows into the engine's requests and the rows that failed on the way."""

    def __call__(self, window: list[SourceRow]) -> PreparedWindow: ...


class GenerateRequests:
    """generate: one request per row, its prompt with the row's sampling settings."""

    def __init__(self, config: JobConfig, tokenizer: Any, max_model_len: int) -> None:
        self.renderer = PromptRenderer(config, tokenizer)
        self.row_settings = RowSettings(config)
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.truncate = config.truncate

    def __call__(self, window: list[SourceRow]) -> PreparedWindow:
        failures: list[Failure] = []
        ready: list[tuple[SourceRow, str, SamplingParams]] = []
        for row in window:
            if row.error is not None:
                failures.append(Failure(row, row.error))
                continue
            try:
                params = self.row_settings.for_row(row.index, row.values)
                text = self.renderer.render(row.values, params)
                ready.append((row, self._bounded(text, params), params))
            except ValueError as exc:
                failures.append(Failure(row, f"{row.where}: {exc}"))
        work = []
        for (row, _, params), encoded in zip(ready, self._encode([text for _, text, _ in ready])):
            fitted = (Failure(row, f"{row.where}: the tokenizer failed on the prompt ({encoded})")
                      if isinstance(encoded, str) else self._fit(row, encoded, params))
            if isinstance(fitted, Failure):
                failures.append(fitted)
            else:
                work.append(Work(row, fitted, params))
        return PreparedWindow(order_for_engine(work, lambda w: w.token_ids), failures)

    def _bounded(self, text: str, params: SamplingParams) -> str:
        """The prompt, or only as much of its kept end as can fit: it is never tokenized whole when it
        is far too long to fit (a 50 MB line would take tens of GB to tokenize)."""
        limit = CHARS_PER_TOKEN * self.max_model_len
        if len(text) <= limit:
            return text
        if self.truncate == "left" or params.truncate_prompt_tokens is not None:  # both keep the end
            return text[-limit:]
        if self.truncate == "right":
            return text[:limit]
        raise ValueError(f"prompt is {len(text):,} characters; more than {CHARS_PER_TOKEN} x max_model_len "
                         f"({limit:,}) cannot fit, so it was not tokenized (set truncate to 'left' or 'right' "
                         f"to cut it)")

    def _encode(self, texts: list[str]) -> list[list[int] | str]:
        """Token ids per text; a text the tokenizer fails on gets the error's text instead."""
        if not texts:
            return []
        special = self.renderer.adds_special_tokens
        try:
            # One batch call: the fast tokenizer encodes the batch in parallel in Rust, outside the GIL.
            return self.tokenizer(texts, add_special_tokens=special)["input_ids"]
        except Exception:  # noqa: BLE001 - the tokenizer's own errors; one bad text must not fail its window
            return [_encode_one(self.tokenizer, text, special) for text in texts]

    def _fit(self, row: SourceRow, token_ids: list[int], params: SamplingParams) -> list[int] | Failure:
        """The prompt cut to leave room for max_tokens when truncation is asked for, else a Failure."""
        token_ids = params.kept_prompt(token_ids, self.max_model_len)
        room = self.max_model_len - params.max_tokens
        if room < 1:
            return Failure(row, f"{row.where}: max_tokens {params.max_tokens} leaves no room for a prompt "
                                f"within max_model_len {self.max_model_len}", len(token_ids))
        if not token_ids:
            return Failure(row, f"{row.where}: the prompt encodes to no tokens", 0)
        if len(token_ids) <= room:
            return token_ids
        if self.truncate == "left":
            return token_ids[-room:]
        if self.truncate == "right":
            return token_ids[:room]
        return Failure(row, f"{row.where}: prompt is {len(token_ids)} tokens; with max_tokens {params.max_tokens} "
                            f"it exceeds max_model_len {self.max_model_len} (set truncate to 'left' or 'right' "
                            f"to cut it)", len(token_ids))


class ScoreRequests:
    """score: one request per row (context, continuation); choice: one per choice (prompt, choice)."""

    def __init__(self, config: JobConfig, tokenizer: Any, max_model_len: int) -> None:
        self.config = config
        self.tokenizer = tokenizer
        # The last position scored is never fed back, so a pair may be one token longer than the model.
        self.limit = max_model_len + 1

    def __call__(self, window: list[SourceRow]) -> PreparedWindow:
        failures: list[Failure] = []
        work: list[Work] = []
        for row in window:
            if row.error is not None:
                failures.append(Failure(row, row.error))
                continue
            try:
                work.extend(self._requests(row))
            except ValueError as exc:
                failures.append(Failure(row, f"{row.where}: {exc}"))
            except Exception as exc:  # noqa: BLE001 - the tokenizer's own errors fail only their row
                failures.append(Failure(row, f"{row.where}: the tokenizer failed ({type(exc).__name__}: {exc})"))
        return PreparedWindow(order_for_engine(work, lambda w: w.token_ids), failures)

    def _requests(self, row: SourceRow) -> list[Work]:
        """Every request of the row, or ValueError when any of them cannot be made."""
        values = row.values or {}
        if self.config.task == "score":
            pair = (_text(values, self.config.context_column), _text(values, self.config.continuation_column))
            return [self._work(row, *pair)]
        context = _text(values, self.config.prompt_column)
        choices = _choices(values, self.config.choices_column)
        return [self._work(row, context, choice, part, len(choices)) for part, choice in enumerate(choices)]

    def _work(self, row: SourceRow, context: str, continuation: str, part: int = 0, parts: int = 1) -> Work:
        context = self._bounded(context, continuation)
        context_ids, continuation_ids = encode_pair(self.tokenizer, context, continuation)
        if not continuation_ids:
            raise ValueError(f"continuation {continuation!r} encodes to no tokens")
        tokens = self._fit(context_ids, continuation_ids)
        request_id = (row.index, part) if self.config.task == "choice" else row.index
        return Work(row, tokens, None, len(tokens) - len(continuation_ids), part, parts, request_id)

    def _bounded(self, context: str, continuation: str) -> str:
        """The context, or its end only, so that a text far too long to fit is never tokenized whole."""
        limit = CHARS_PER_TOKEN * self.limit
        if len(context) + len(continuation) <= limit:
            return context
        if self.config.truncate == "left" and len(continuation) < limit:
            return context[len(context) + len(continuation) - limit:]
        raise ValueError(f"context and continuation are {len(context) + len(continuation):,} characters; more than "
                         f"{CHARS_PER_TOKEN} x (max_model_len + 1) ({limit:,}) cannot fit, so they were not "
                         f"tokenized (set truncate to 'left' to cut the context)")

    def _fit(self, context_ids: list[int], continuation_ids: list[int]) -> list[int]:
        tokens = context_ids + continuation_ids
        if len(tokens) <= self.limit:
            return tokens
        # Left truncation drops the oldest context; at least one context token must stay to score from.
        if self.config.truncate == "left" and len(continuation_ids) < self.limit:
            return tokens[-self.limit:]
        raise ValueError(f"context and continuation are {len(tokens)} tokens; that exceeds max_model_len "
                         f"{self.limit - 1} + 1 (set truncate to 'left' to cut the context)")


def _encode_one(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int] | str:
    try:
        return tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
    except Exception as exc:  # noqa: BLE001 - see GenerateRequests._encode
        return f"{type(exc).__name__}: {exc}"


def _text(values: dict[str, Any], column: str) -> str:
    if column not in values:
        raise ValueError(f"no {column!r} field")
    value = values[column]
    if not isinstance(value, str):
        raise ValueError(f"{column!r} must be a string, got {type(value).__name__}")
    return value


def _choices(values: dict[str, Any], column: str) -> list[str]:
    if column not in values:
        raise ValueError(f"no {column!r} field")
    value = values[column]
    # Parquet lists arrive as lists; numpy arrays are not expected from the readers.
    if not isinstance(value, list) or not value:
        raise ValueError(f"{column!r} must be a non-empty list of strings")
    if not all(isinstance(choice, str) for choice in value):
        raise ValueError(f"{column!r} must hold only strings")
    return value


def length_bin(num_tokens: int) -> int:
    """Power-of-two bins: 1, 2-3, 4-7, ..., 512-1023, ...; coarse enough to keep prefix groups whole."""
    return num_tokens.bit_length()


def order_for_engine(items: Sequence[Item], tokens_of: Callable[[Item], list[int]]) -> list[Item]:
    # Within a bin, sorting the token lists themselves puts every group with a common prefix together,
    # whatever that prefix's length.
    return sorted(items, key=lambda item: (length_bin(len(tokens_of(item))), tokens_of(item)))
