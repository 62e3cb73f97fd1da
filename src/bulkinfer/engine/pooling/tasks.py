"""What a loaded model can pool for, and the head each task reads its pooled state with.

A causal LM embeds (its final-normed hidden states) and, named a reranker by ``classifier_from_token``, scores a
(query, document) prompt with two of its LM head's rows; a ``*ForSequenceClassification`` checkpoint classifies
and rewards with its ``score`` head, and with one label scores pairs as a cross-encoder; a bare ``*Model``
checkpoint only embeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.pooling.method import pooling_method
from bulkinfer.engine.pooling.pooler import Head, Pooler
from bulkinfer.models.config import ModelConfig
from bulkinfer.pooling_params import PoolingParams

POOLING_TASKS = ("embed", "classify", "reward", "score")


@dataclass(frozen=True)
class PoolingModel:
    head: str  # ModelConfig.head: lm, classifier or none
    method: str  # how an embedding pools: last, mean or cls
    labels: tuple[str, ...]  # a classifier's
    hidden_size: int
    rerank_ids: tuple[int, int] | None  # a reranker's (false, true) token ids
    tensor_parallel: bool

    @classmethod
    def of(cls, options: EngineConfig, config: ModelConfig, path: Path, tokenizer: Any) -> PoolingModel:
        rerank_ids = None
        if options.classifier_from_token is not None:
            rerank_ids = tuple(_token_id(tokenizer, token) for token in options.classifier_from_token)
        return cls(config.head, pooling_method(options.pooling, path), config.labels, config.hidden_size,
                   rerank_ids, options.tensor_parallel_size > 1)

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks one request can run. A model that only embeds still scores pairs, through two embeddings
        (LLM.score); ``score`` here means one request scores a rendered pair."""
        return pooling_tasks(self.head, len(self.labels), self.rerank_ids is not None, self.tensor_parallel)

    def refusal(self, task: str, params: PoolingParams) -> str | None:
        """Why this model cannot run a request of this task with these params; None if it can."""
        if task not in self.tasks:
            why = " (set classifier_from_token to make a causal LM a reranker)" if task == "score" else ""
            return f"this model cannot {task}{why}; it serves {', '.join(self.tasks)}"
        if task == "embed" and params.dimensions is not None and params.dimensions > self.hidden_size:
            return f"dimensions {params.dimensions} is above the model's hidden size ({self.hidden_size})"
        return None

    def pooler(self, task: str, model: Any) -> Pooler:
        """A request's pooler: an embedding pools as set; the heads read the last token, as transformers'
        sequence classifiers and rerankers do."""
        return Pooler(self.method if task == "embed" else "last", self._head(task, model))

    def _head(self, task: str, model: Any) -> Head:
        if task == "embed":
            return lambda pooled: pooled
        if self.head == "classifier":
            return lambda pooled: model.classify(pooled[None])[0]
        rows = list(self.rerank_ids)
        return lambda pooled: model.compute_logits(pooled[None])[0, rows]


def pooling_tasks(head: str, num_labels: int, reranker: bool, tensor_parallel: bool) -> tuple[str, ...]:
    """What a model with this head can pool for (see PoolingModel.tasks)."""
    if head == "classifier":
        return ("classify", "reward") + (("score",) if num_labels == 1 else ())
    # The reranker's head reads the LM head, which tensor parallelism splits across ranks.
    pair = head == "lm" and reranker and not tensor_parallel
    return ("embed",) + (("score",) if pair else ())


def model_tasks(config: ModelConfig, options: EngineConfig) -> tuple[str, ...]:
    """What one request can ask of a model, read from its config before it loads: ``generate`` with an LM
    head, and the pooling tasks (LLM.supported_tasks once it has loaded)."""
    generate = ("generate",) if config.head == "lm" else ()
    return generate + pooling_tasks(config.head, len(config.labels), options.classifier_from_token is not None,
                                    options.tensor_parallel_size > 1)


def _token_id(tokenizer: Any, token: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise ValueError(f"classifier_from_token: {token!r} is not a token of this model's vocabulary")
    return token_id
