"""The bodies of /v1/embeddings, /v1/score and /v1/rerank lines -> their rows of the request table.

A line may ask for several things at once (a list of inputs, a query and many documents), while the runner
computes one embedding or one pair's score per row; so a line becomes one row per input or pair, and the
export gathers them back into the line's one response (pooling_responses.py). Every body mistake is a
ValueError here, which the caller makes that line's error.
"""

from __future__ import annotations

from typing import Any, Callable

EMBEDDINGS_URL = "/v1/embeddings"
SCORE_URL = "/v1/score"
RERANK_URL = "/v1/rerank"
ENCODING_FORMATS = ("float", "base64")
# The table's columns for each task: a line's rows carry its custom_id and line number (batch_line) and how many
# rows it has (batch_items), so the export knows when it holds all of a line; body_* keep what the export needs.
_LINE_COLUMNS = ("custom_id", "url", "body_model", "batch_line", "batch_items", "batch_error")
EMBED_COLUMNS = (*_LINE_COLUMNS, "prompt", "body_dimensions", "body_encoding_format")
RERANK_COLUMNS = (*_LINE_COLUMNS, "query", "document", "body_top_n")

Rows = list[dict[str, Any]]
_INT64_MAX = 2**63 - 1  # the table's integer columns are int64


def embeddings_rows(body: dict[str, Any]) -> Rows:
    """One row per input: `input` is a string or a list of strings, as OpenAI takes it (token ids are not)."""
    texts = _texts(body.get("input"), "input")
    dimensions = body.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or not 1 <= dimensions <= _INT64_MAX):
        raise ValueError(f"body.dimensions must be an integer in [1, 2**63 - 1], got {dimensions!r}")
    encoding = "float" if body.get("encoding_format") is None else body["encoding_format"]
    if encoding not in ENCODING_FORMATS:
        raise ValueError(f"body.encoding_format must be one of {', '.join(ENCODING_FORMATS)}, got {encoding!r}")
    return [{"prompt": text, "body_dimensions": dimensions, "body_encoding_format": encoding} for text in texts]


def score_rows(body: dict[str, Any]) -> Rows:
    """One row per pair, as vLLM pairs text_1 with text_2: one with one, one with each, or the i-th with the i-th."""
    firsts, seconds = _texts(body.get("text_1"), "text_1"), _texts(body.get("text_2"), "text_2")
    if len(firsts) == 1:
        firsts = firsts * len(seconds)
    if len(firsts) != len(seconds):
        raise ValueError(f"body.text_1 has {len(firsts)} texts and body.text_2 {len(seconds)}; they pair 1:1, "
                         f"1:N or N:N")
    return [{"query": first, "document": second} for first, second in zip(firsts, seconds)]


def rerank_rows(body: dict[str, Any]) -> Rows:
    """One row per document (a list of strings, or one string as vLLM takes it), each paired with the query.
    top_n cuts the answer, not the work; it is kept as the number of results, 0 or none (vLLM's "all") included."""
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise ValueError("body.query must be a non-empty string")
    documents = _texts(body.get("documents"), "documents")
    top_n = body.get("top_n")
    if top_n is not None and not _is_int(top_n):
        raise ValueError(f"body.top_n must be an integer, got {top_n!r}")
    kept = len(documents) if top_n is None or not 0 < top_n < len(documents) else top_n
    return [{"query": query, "document": document, "body_top_n": kept} for document in documents]


BODY_ROWS: dict[str, Callable[[dict[str, Any]], Rows]] = {
    EMBEDDINGS_URL: embeddings_rows, SCORE_URL: score_rows, RERANK_URL: rerank_rows}


def _texts(value: Any, field: str) -> list[str]:
    """A non-empty string or a non-empty list of them: an empty text has nothing to pool."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts:
        raise ValueError(f"body.{field} must be a non-empty string or a non-empty list of strings")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            kind = "token ids are not supported" if isinstance(text, (int, list)) else f"got {type(text).__name__}"
            raise ValueError(f"body.{field}[{index}] must be a string ({kind})")
        if not text:
            raise ValueError(f"body.{field}[{index}] is an empty string" if isinstance(value, list)
                             else f"body.{field} is an empty string")
    return texts


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
