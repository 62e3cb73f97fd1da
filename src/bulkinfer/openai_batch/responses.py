"""One exported result row -> one OpenAI batch output line, shaped like the API's own."""

from __future__ import annotations

from typing import Any

from bulkinfer.openai_batch.requests import CHAT_URL


def output_line(row: dict[str, Any], created: int) -> dict[str, Any]:
    """A success is status 200 with a chat.completion or text_completion body; any failure, status 400."""
    index = row["row_index"]
    error = row.get("batch_error") or row.get("error")
    if error is not None:
        body = {"error": {"message": error, "type": "invalid_request_error", "param": None, "code": None}}
        status = 400
    else:
        body = _completion(row, created)
        status = 200
    return {"id": f"batch_req_{index}", "custom_id": row.get("custom_id"),
            "response": {"status_code": status, "request_id": f"req_{index}", "body": body}, "error": None}


def _completion(row: dict[str, Any], created: int) -> dict[str, Any]:
    chat = row["url"] == CHAT_URL
    texts, reasons = _as_list(row["generated_text"]), _as_list(row["finish_reason"])
    completion_tokens = sum(_as_list(row["completion_tokens"]))
    choices = [_chat_choice(i, text, reason) if chat else _text_choice(i, text, reason)
               for i, (text, reason) in enumerate(zip(texts, reasons))]
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{row['row_index']}",
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": row.get("body_model") or "",
        "choices": choices,
        "usage": {"prompt_tokens": row["prompt_tokens"], "completion_tokens": completion_tokens,
                  "total_tokens": row["prompt_tokens"] + completion_tokens},
    }


def _chat_choice(index: int, text: str, reason: str) -> dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": text, "refusal": None},
            "finish_reason": reason, "logprobs": None}


def _text_choice(index: int, text: str, reason: str) -> dict[str, Any]:
    return {"index": index, "text": text, "finish_reason": reason, "logprobs": None}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
