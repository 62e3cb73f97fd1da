"""Turn a window of input rows into token ids and sampling settings, or into error rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

from bulkinfer.runner.binning import order_for_engine
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import PromptRenderer
from bulkinfer.runner.row_params import RowParams
from bulkinfer.runner.rows import SourceRow
from bulkinfer.sampling_params import SamplingParams


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


class Preparer:
    def __init__(self, config: JobConfig, tokenizer: Any, max_model_len: int) -> None:
        self.renderer = PromptRenderer(config, tokenizer)
        self.row_params = RowParams(config.sampling_params(), config.param_columns, config.seed)
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
                ready.append((row, self.renderer.render(row.values), self.row_params.for_row(row.index, row.values)))
            except ValueError as exc:
                failures.append(Failure(row, f"{row.where}: {exc}"))
        encoded = self._encode([text for _, text, _ in ready])
        work = []
        for (row, _, params), token_ids in zip(ready, encoded):
            fitted = self._fit(row, token_ids, params)
            if isinstance(fitted, Failure):
                failures.append(fitted)
            else:
                work.append(Work(row, fitted, params))
        return PreparedWindow(order_for_engine(work, lambda w: w.token_ids), failures)

    def _encode(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        # One batch call: the fast tokenizer encodes the batch in parallel in Rust, outside the GIL.
        return self.tokenizer(texts, add_special_tokens=self.renderer.adds_special_tokens)["input_ids"]

    def _fit(self, row: SourceRow, token_ids: list[int], params: SamplingParams) -> list[int] | Failure:
        """The prompt cut to leave room for max_tokens when truncation is asked for, else a Failure."""
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
