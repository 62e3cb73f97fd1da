"""The token ids one ``score`` request reads for a (query, document) pair, made where the engine scores pairs
(LLM.score) and where a job prepares its rows (the rerank task), so that the two read the same tokens."""

from __future__ import annotations

from typing import Any


def pair_prompt_ids(tokenizer: Any, head: str, template: str, query: str, document: str) -> list[int]:
    """A reranker's template filled in and encoded, or the tokenizer's own pair encoding for a cross-encoder
    (a model whose ``head`` is a classifier)."""
    if head == "classifier":
        return tokenizer(query, document)["input_ids"]
    return tokenizer.encode(template.replace("{query}", query).replace("{document}", document))
