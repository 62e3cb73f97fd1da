"""The runner's logprobs (token ids) -> the `logprobs` objects of chat.completion and text_completion choices."""

from __future__ import annotations

from typing import Any, Callable

Decode = Callable[[int], str]  # one token id -> its text


def chat_logprobs(positions: list[dict[str, Any]], top: int, decode: Decode) -> dict[str, Any]:
    content = [{**_token(p["token_id"], p["logprob"], decode),
                "top_logprobs": [_token(c["token_id"], c["logprob"], decode) for c in p["top_logprobs"][:top]]}
               for p in positions]
    return {"content": content, "refusal": None}


def completion_logprobs(positions: list[dict[str, Any]], top: int, decode: Decode) -> dict[str, Any]:
    tokens = [decode(p["token_id"]) for p in positions]
    # Offsets into the completion's text (the API counts from the prompt's start only with echo).
    offsets = [sum(len(token) for token in tokens[:i]) for i in range(len(tokens))]
    return {"tokens": tokens, "token_logprobs": [p["logprob"] for p in positions],
            "top_logprobs": [{decode(c["token_id"]): c["logprob"] for c in p["top_logprobs"][:top]}
                             for p in positions],
            "text_offset": offsets}


def _token(token_id: int, logprob: float, decode: Decode) -> dict[str, Any]:
    text = decode(token_id)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
