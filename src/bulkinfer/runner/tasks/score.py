"""score and choice: prefill-only requests that score continuations, one module because choice is score
over several continuations of one prompt.

score: one request per row (context, continuation); its logprob and whether greedy decoding would have
written it. choice: one request per choice (prompt, choice), every choice's score and the best, raw and
normalised by length; the row's result waits until all of its choices are back.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.engine.scoring import Loglikelihood, encode_pair, loglikelihood_of
from bulkinfer.outputs import RequestOutput
from bulkinfer.runner.adapters import RowAdapters
from bulkinfer.runner.bins import order_for_engine
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import CHARS_PER_TOKEN, text_field
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.base import (
    ERROR,
    PROMPT_TOKENS,
    EngineFacts,
    Row,
    result_row,
)
from bulkinfer.runner.tasks.work import Failure, PreparedWindow, Work


class ScoreTask:
    ENGINE_TASK = "generate"
    COLUMNS: dict[str, pa.DataType] = {"logprob": pa.float64(), "is_greedy": pa.bool_()}

    def __init__(self, config: JobConfig, engine: EngineFacts) -> None:
        self.config = config
        self.row_adapters = RowAdapters(config)
        self.types = self.result_types(False)
        self.tokenizer = engine.tokenizer
        # The last position scored is never fed back, so a pair may be one token longer than the model.
        self.limit = engine.max_model_len + 1
        # row index -> the (request, output) pairs back so far; rows still in flight are redone on resume.
        self.waiting: dict[int, list[tuple[Work, RequestOutput]]] = {}

    @staticmethod
    def input_columns(config: JobConfig) -> list[tuple[str, str]]:
        return [("context_column", config.context_column), ("continuation_column", config.continuation_column)]

    @classmethod
    def result_types(cls, list_outputs: bool) -> dict[str, pa.DataType]:
        return {**cls.COLUMNS, "prompt_tokens": PROMPT_TOKENS, "error": ERROR}

    def prepare(self, window: list[SourceRow]) -> PreparedWindow:
        failures: list[Failure] = []
        work: list[Work] = []
        for row in window:
            if row.error is not None:
                failures.append(Failure(row, row.error))
                continue
            try:
                pairs = self._pairs(row.values or {})
                lora = self.row_adapters.for_row(row.values or {})
                # All of the row's requests or none: one that cannot be made fails the row.
                work.extend([self._work(row, *pair, part, len(pairs), lora) for part, pair in enumerate(pairs)])
            except ValueError as exc:
                failures.append(Failure(row, f"{row.where}: {exc}"))
            except Exception as exc:  # noqa: BLE001 - the tokenizer's own errors fail only their row
                failures.append(Failure(row, f"{row.where}: the tokenizer failed ({type(exc).__name__}: {exc})"))
        return PreparedWindow(order_for_engine(work, lambda w: w.token_ids), failures)

    def collect(self, work: Work, output: RequestOutput) -> Row | None:
        back = self.waiting.setdefault(work.row.index, [])
        back.append((work, output))
        if len(back) < work.parts:
            return None
        del self.waiting[work.row.index]
        back.sort(key=lambda pair: pair[0].part)
        prompt_tokens = sum(len(out.prompt_token_ids) for _, out in back)
        error = next((out.error for _, out in back if out.error is not None), None)
        if error is not None:
            return self.failure(work.row, f"{work.row.where}: {error}", prompt_tokens)
        scores = [loglikelihood_of(out.prompt_token_ids[w.score_from:], out.prompt_logprobs[w.score_from:])
                  for w, out in back]
        return self._row(work.row, self._values(scores), prompt_tokens, None)

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> Row:
        return self._row(row, dict.fromkeys(self.COLUMNS), prompt_tokens, error)

    def _pairs(self, values: dict[str, Any]) -> list[tuple[str, str]]:
        """The row's (context, continuation) pairs, one request each; ValueError when the row has none."""
        return [(text_field(values, self.config.context_column), text_field(values, self.config.continuation_column))]

    def _request_id(self, row: SourceRow, part: int) -> Any:
        return row.index

    def _values(self, scores: list[Loglikelihood]) -> Row:
        return {"logprob": scores[0].logprob, "is_greedy": scores[0].is_greedy}

    def _row(self, row: SourceRow, columns: Row, prompt_tokens: int | None, error: str | None) -> Row:
        return result_row(row, {**columns, "prompt_tokens": prompt_tokens, "error": error})

    def _work(self, row: SourceRow, context: str, continuation: str, part: int, parts: int,
              lora: LoRARequest | None) -> Work:
        context = self._bounded(context, continuation)
        context_ids, continuation_ids = encode_pair(self.tokenizer, context, continuation)
        if not continuation_ids:
            raise ValueError(f"continuation {continuation!r} encodes to no tokens")
        tokens = self._fit(context_ids, continuation_ids)
        return Work(row, tokens, None, len(tokens) - len(continuation_ids), part, parts, self._request_id(row, part),
                    lora)

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


class ChoiceTask(ScoreTask):
    COLUMNS = {"choice_logprobs": pa.list_(pa.float64()), "choice_logprobs_norm": pa.list_(pa.float64()),
               "choice": pa.int64(), "choice_norm": pa.int64()}

    @staticmethod
    def input_columns(config: JobConfig) -> list[tuple[str, str]]:
        return [("prompt_column", config.prompt_column), ("choices_column", config.choices_column)]

    def _pairs(self, values: dict[str, Any]) -> list[tuple[str, str]]:
        context = text_field(values, self.config.prompt_column)
        return [(context, choice) for choice in _choices(values, self.config.choices_column)]

    def _request_id(self, row: SourceRow, part: int) -> Any:
        return (row.index, part)

    def _values(self, scores: list[Loglikelihood]) -> Row:
        raw = [score.logprob for score in scores]
        # Normalised by continuation length in tokens, so long choices are not penalised for length alone.
        norm = [score.logprob / len(score.token_logprobs) for score in scores]
        return {"choice_logprobs": raw, "choice_logprobs_norm": norm, "choice": _argmax(raw),
                "choice_norm": _argmax(norm)}


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


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)
