"""Turn rows of the score and choice tasks into prefill-only scoring requests, or into error rows."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.scoring import encode_pair
from bulkinfer.runner.binning import order_for_engine
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prepare import Failure, PreparedWindow, Work
from bulkinfer.runner.rows import SourceRow


class ScorePreparer:
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
        context_ids, continuation_ids = encode_pair(self.tokenizer, context, continuation)
        if not continuation_ids:
            raise ValueError(f"continuation {continuation!r} encodes to no tokens")
        tokens = self._fit(context_ids, continuation_ids)
        request_id = (row.index, part) if self.config.task == "choice" else row.index
        return Work(row, tokens, None, len(tokens) - len(continuation_ids), part, parts, request_id)

    def _fit(self, context_ids: list[int], continuation_ids: list[int]) -> list[int]:
        tokens = context_ids + continuation_ids
        if len(tokens) <= self.limit:
            return tokens
        # Left truncation drops the oldest context; at least one context token must stay to score from.
        if self.config.truncate == "left" and len(continuation_ids) < self.limit:
            return tokens[-self.limit:]
        raise ValueError(f"context and continuation are {len(tokens)} tokens; that exceeds max_model_len "
                         f"{self.limit - 1} + 1 (set truncate to 'left' to cut the context)")


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
