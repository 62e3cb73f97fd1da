"""The result rows of one /v1/embeddings, /v1/score or /v1/rerank line -> its response body: OpenAI's embeddings
object, and vLLM's score and rerank objects (vllm/entrypoints/pooling/score/protocol.py: ScoreResponse,
RerankResponse), as `vllm run-batch` answers them."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from bulkinfer.openai_batch.pooling_requests import EMBEDDINGS_URL, SCORE_URL

Rows = list[dict[str, Any]]
_NORM_FLOOR = 1e-12  # as the engine's normalize: a zero vector stays zero instead of becoming NaN


def pooling_body(rows: Rows, created: int, request_id: str, normalized: bool) -> dict[str, Any]:
    """`rows`: the line's rows in input order, none failed. `normalized`: whether the job's embeddings are unit
    length, so that a body's dimensions, cutting them, scales them back to it. ValueError: the line's error."""
    url, model = rows[0]["url"], rows[0]["body_model"] or ""
    tokens = sum(row["prompt_tokens"] for row in rows)
    if url == EMBEDDINGS_URL:
        data = [{"object": "embedding", "index": index, "embedding": _embedding(row, normalized)}
                for index, row in enumerate(rows)]
        return {"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    if url == SCORE_URL:
        data = [{"index": index, "object": "score", "score": row["score"]} for index, row in enumerate(rows)]
        return {"id": f"score-{request_id}", "object": "list", "created": created, "model": model, "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}}
    return {"id": f"rerank-{request_id}", "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": _ranked(rows)}


def _embedding(row: dict[str, Any], normalized: bool) -> list[float] | str:
    vector = np.asarray(row["embedding"], dtype=np.float32)
    dimensions = row["body_dimensions"]
    if dimensions is not None:
        if dimensions > len(vector):
            raise ValueError(f"body.dimensions {dimensions} is above the embedding's size ({len(vector)})")
        vector = vector[:dimensions]
        if normalized:
            vector = vector / max(float(np.linalg.norm(vector)), _NORM_FLOOR)
    if row["body_encoding_format"] == "base64":  # OpenAI's bytes: little-endian float32
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def _ranked(rows: Rows) -> list[dict[str, Any]]:
    """The top_n highest scores first (ties in document order), as vLLM, Jina and Cohere answer."""
    results = sorted(({"index": index, "document": {"text": row["document"]}, "relevance_score": row["score"]}
                      for index, row in enumerate(rows)), key=lambda result: -result["relevance_score"])
    return results[:rows[0]["body_top_n"]]
