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


@dataclass
class EmbeddingOutput:
    embedding: list[float]


@dataclass
class ClassificationOutput:
    probs: list[float]  # softmax over the labels; one label: its sigmoid
    label: str | None = None  # the likeliest label's name (id2label)


@dataclass
class ScoringOutput:
    score: float  # a reranker's yes probability, a cross-encoder's sigmoid, or an embedding cosine similarity


@dataclass
class PoolingOutput:
    data: Any  # torch.Tensor [num_labels]: the head's raw output (a reward model's score)


@dataclass
class PoolingRequestOutput:
    """A pooling request's result (vLLM's shape): ``outputs`` is one EmbeddingOutput, ClassificationOutput,
    ScoringOutput or PoolingOutput, or None when ``error`` says why the request could not run."""

    request_id: Any
    outputs: Any
    prompt_token_ids: list[int]
    finished: bool = True
    num_cached_tokens: int | None = None  # prompt tokens whose KV came from the prefix cache
    error: str | None = None


class EmbeddingRequestOutput(PoolingRequestOutput):
    outputs: EmbeddingOutput


class ClassificationRequestOutput(PoolingRequestOutput):
    outputs: ClassificationOutput


class ScoringRequestOutput(PoolingRequestOutput):
    outputs: ScoringOutput
