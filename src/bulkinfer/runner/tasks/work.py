"""What a task hands the loop for a window of rows: the engine's requests (Work), in the order to send
them, and the rows that could not become requests (Failure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable

from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.pooling_params import PoolingParams
from bulkinfer.runner.readers import SourceRow
from bulkinfer.sampling_params import SamplingParams

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM


@dataclass
class Work:
    row: SourceRow
    token_ids: list[int]
    params: SamplingParams | PoolingParams | None  # None for a scoring request
    score_from: int | None = None  # set: a prefill-only request scoring the tokens from here on
    part: int = 0  # a row may fan out into several requests (one per choice); this one's number
    parts: int = 1
    request_id: Hashable = None  # None: the row's index
    lora: LoRARequest | None = None  # the row's LoRA adapter; None: the base model

    def __post_init__(self) -> None:
        if self.request_id is None:
            self.request_id = self.row.index

    def send(self, llm: LLM) -> None:
        """Hand the request to the engine. A task whose requests are of another kind sends them with its own
        Work subclass, so the loop needs no change for it."""
        if self.score_from is None:
            llm.add_request(self.request_id, self.token_ids, self.params, self.lora)
        else:
            llm.add_scoring_request(self.request_id, self.token_ids, self.score_from, self.lora)


@dataclass
class Failure:
    row: SourceRow
    error: str
    prompt_tokens: int | None = None


@dataclass
class PreparedWindow:
    work: list[Work]  # in the order to hand to the engine
    failures: list[Failure]
