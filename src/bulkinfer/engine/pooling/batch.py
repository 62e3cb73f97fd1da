"""``LLM.embed``, ``classify``, ``reward`` and ``score``: lists of prompts run as pooling requests through the
engine's ``add_pooling_request``/``step``, outputs in input order (vLLM's shapes)."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from bulkinfer.outputs import PoolingRequestOutput, ScoringOutput, ScoringRequestOutput
from bulkinfer.pooling_params import PoolingParams

_pooling_ids = itertools.count()


class Engine(Protocol):
    """What batch pooling needs of the engine (LLM is one)."""

    tokenizer: Any

    @property
    def supported_tasks(self) -> tuple[str, ...]: ...

    def add_pooling_request(self, request_id: Hashable, prompt_token_ids: list[int], task: str,
                            params: PoolingParams | None = None) -> None: ...

    def score_prompt_ids(self, query: str, document: str) -> list[int]: ...

    def step(self) -> list[Any]: ...


def run_pooling(llm: Engine, prompts: list[list[int]], task: str, params: PoolingParams | None,
                use_tqdm: bool) -> list[PoolingRequestOutput]:
    """Each prompt's token ids run as one request of ``task``; a prompt that cannot run gets its error."""
    positions = {}
    for index, token_ids in enumerate(prompts):
        request_id = ("pool", next(_pooling_ids))
        positions[request_id] = index
        llm.add_pooling_request(request_id, token_ids, task, params)
    results: list[PoolingRequestOutput | None] = [None] * len(prompts)
    with tqdm(total=len(prompts), desc=task, disable=not use_tqdm) as bar:
        while positions:
            for output in llm.step():
                results[positions.pop(output.request_id)] = output
                bar.update(1)
    return results


def score(llm: Engine, queries: list[str], documents: list[str], encode, use_tqdm: bool) -> list[ScoringRequestOutput]:
    """Each (query, document) pair's score: in one request where the model scores pairs (a reranker, a
    cross-encoder), else as the cosine similarity of the two texts' embeddings. ``encode``: text -> token ids."""
    if "score" in llm.supported_tasks:
        prompts = [llm.score_prompt_ids(query, document) for query, document in zip(queries, documents)]
        return run_pooling(llm, prompts, "score", None, use_tqdm)
    if "embed" not in llm.supported_tasks:
        raise ValueError(f"this model cannot score pairs; it serves {', '.join(llm.supported_tasks)}")
    texts = list(dict.fromkeys(queries + documents))  # a query shared by every pair is embedded once
    embedded = dict(zip(texts, run_pooling(llm, [encode(text) for text in texts], "embed", None, use_tqdm)))
    return [_cosine(("score", index), embedded[query], embedded[document])
            for index, (query, document) in enumerate(zip(queries, documents))]


def _cosine(request_id: Hashable, query: PoolingRequestOutput,
            document: PoolingRequestOutput) -> ScoringRequestOutput:
    token_ids = query.prompt_token_ids + document.prompt_token_ids
    error = query.error or document.error
    if error:
        return ScoringRequestOutput(request_id, None, token_ids, error=error)
    similarity = torch.nn.functional.cosine_similarity(torch.tensor(query.outputs.embedding),
                                                       torch.tensor(document.outputs.embedding), dim=0)
    return ScoringRequestOutput(request_id, ScoringOutput(float(similarity)), token_ids)


def pairs(queries: str | list[str], documents: str | list[str]) -> tuple[list[str], list[str]]:
    """vLLM's pairing: one query against each document, or two lists of the same length pair by pair."""
    queries = [queries] if isinstance(queries, str) else list(queries)
    documents = [documents] if isinstance(documents, str) else list(documents)
    if len(queries) == 1:
        queries = queries * len(documents)
    if len(queries) != len(documents):
        raise ValueError(f"score pairs queries with documents one to one: got {len(queries)} queries "
                         f"and {len(documents)} documents")
    return queries, documents
