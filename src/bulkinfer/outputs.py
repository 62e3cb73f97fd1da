"""What the engine hands back for each request (vLLM's shapes, so that user code carries over)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Logprob:
    logprob: float
    rank: int
    decoded_token: str | None = None


# One dict per position: token id -> Logprob (the chosen token plus the top-k asked for).
PositionLogprobs = dict[int, Logprob]


@dataclass
class ToolCall:
    """A function call a model made, in OpenAI's shape: ``arguments`` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[PositionLogprobs] | None
    finish_reason: str | None  # "stop" | "length" | None while running or on error
    stop_reason: int | str | None = None  # the stop string or stop token that ended it
    reasoning: str | None = None  # a thinking model's reasoning, apart from `text` (None: no reasoning parser)
    num_reasoning_tokens: int = 0  # of token_ids, how many are reasoning
    tool_calls: list[ToolCall] | None = None  # the calls parsed out of `text` (None: no tool-call parser ran)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: Any
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    prompt_logprobs: list[PositionLogprobs | None] | None = None
    finished: bool = True
    num_cached_tokens: int | None = None  # prompt tokens whose KV came from the prefix cache
    error: str | None = None  # set when the request could not run at all (e.g. too long)
