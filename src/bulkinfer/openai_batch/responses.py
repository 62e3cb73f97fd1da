"""One request line's exported result rows -> its OpenAI batch output line, shaped like the API's own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bulkinfer.openai_batch.logprobs import Decode, chat_logprobs, completion_logprobs
from bulkinfer.openai_batch.pooling_requests import BODY_ROWS
from bulkinfer.openai_batch.pooling_responses import pooling_body
from bulkinfer.openai_batch.requests import CHAT_URL


@dataclass(frozen=True)
class JobAnswers:
    """What every line's answer takes from the job."""

    created: int  # the bodies' `created`: when the export ran
    decode: Decode  # for logprobs
    normalized: bool  # whether the job's embeddings are unit length (see pooling_body)


def output_line(rows: list[dict[str, Any]], job: JobAnswers, request_id: str) -> dict[str, Any]:
    """A success is status 200 with the url's body (chat.completion, text_completion, embeddings, score or
    rerank); any failure, the first of the line's rows' errors, status 400. `rows`: the line's rows, one unless
    the line asked for several inputs. `request_id`: the request's own hex id, from which the line's ids are made."""
    errors = (row.get("batch_error") or row.get("error") for row in rows)
    error = next((error for error in errors if error is not None), None)
    if error is None:
        try:
            body = _answer(rows, job, request_id)
        except ValueError as exc:  # what the export alone can tell: a body's dimensions above the embedding's
            error = str(exc)
    if error is not None:
        body = {"error": {"message": error, "type": "invalid_request_error", "param": None, "code": None}}
    return {"id": f"batch_req_{request_id}", "custom_id": rows[0].get("custom_id"),
            "response": {"status_code": 200 if error is None else 400, "request_id": f"req_{request_id}",
                         "body": body}, "error": None}


def _answer(rows: list[dict[str, Any]], job: JobAnswers, request_id: str) -> dict[str, Any]:
    if rows[0]["url"] in BODY_ROWS:
        return pooling_body(rows, job.created, request_id, job.normalized)
    return _completion(rows[0], job.created, job.decode, request_id)


def _completion(row: dict[str, Any], created: int, decode: Decode, request_id: str) -> dict[str, Any]:
    chat = row["url"] == CHAT_URL
    texts, reasons = _as_list(row["generated_text"]), _as_list(row["finish_reason"])
    logprobs = _choice_logprobs(row, len(texts), chat, decode)
    tool_calls = _per_sample(row, "tool_calls", len(texts))
    completion_tokens = sum(_as_list(row["completion_tokens"]))
    choices = [_chat_choice(i, text, reason, lp, calls) if chat else _text_choice(i, text, reason, lp)
               for i, (text, reason, lp, calls) in enumerate(zip(texts, reasons, logprobs, tool_calls))]
    if chat and "generated_reasoning" in row:
        for choice, reasoning in zip(choices, _as_list(row["generated_reasoning"])):
            # As vLLM writes it: null when the model wrote no reasoning.
            choice["message"]["reasoning_content"] = reasoning or None
    usage = {"prompt_tokens": row["prompt_tokens"], "completion_tokens": completion_tokens,
             "total_tokens": row["prompt_tokens"] + completion_tokens}
    if "reasoning_tokens" in row:
        usage["completion_tokens_details"] = {"reasoning_tokens": sum(_as_list(row["reasoning_tokens"]))}
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": row.get("body_model") or "",
        "choices": choices,
        "usage": usage,
    }


def _choice_logprobs(row: dict[str, Any], samples: int, chat: bool, decode: Decode) -> list[Any]:
    """One logprobs object per choice, or None for each when the request asked for none."""
    per_sample = row.get("logprobs")
    if row.get("body_logprobs") is None or not per_sample:
        return [None] * samples
    convert = chat_logprobs if chat else completion_logprobs
    return [convert(positions, row["body_logprobs"], decode) if positions is not None else None
            for positions in per_sample]


def _chat_choice(index: int, text: str, reason: str, logprobs: Any, calls: list[dict] | None) -> dict[str, Any]:
    """With tool calls, the message carries them (content null when nothing else was written) and the
    choice finishes with "tool_calls", as OpenAI's API answers."""
    message = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["content"] = text or None
        message["tool_calls"] = [{"id": call["id"], "type": "function",
                                  "function": {"name": call["name"], "arguments": call["arguments"]}}
                                 for call in calls]
        reason = "tool_calls" if reason == "stop" else reason
    return {"index": index, "message": message, "finish_reason": reason, "logprobs": logprobs}


def _text_choice(index: int, text: str, reason: str, logprobs: Any) -> dict[str, Any]:
    return {"index": index, "text": text, "finish_reason": reason, "logprobs": logprobs}


def _per_sample(row: dict[str, Any], column: str, samples: int) -> list[Any]:
    """A per-sample column's values, one per choice (None for each when the job has no such column). The
    column holds one value per sample when generated_text does; a value of its own may be a list."""
    value = row.get(column)
    if value is None:
        return [None] * samples
    return value if isinstance(row["generated_text"], list) else [value]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
