"""One OpenAI batch request line -> its rows of the request table and the task it needs, or the reason it cannot
run. A chat or completions line is one row; the pooling endpoints' bodies are read in pooling_requests.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bulkinfer.openai_batch.pooling_requests import (
    BODY_ROWS,
    EMBED_COLUMNS,
    EMBEDDINGS_URL,
    RERANK_COLUMNS,
    RERANK_URL,
    SCORE_URL,
)
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import settings_of
from bulkinfer.tool_params import check_tool_choice, parsed_tool_choice, parsed_tools

CHAT_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
# Every sampling option a body may set, by SamplingParams' names (as vLLM's server takes them, top_k and the
# like included); the request table holds them as body_<param> columns (null: the job's setting).
PER_ROW = tuple(s for s in settings_of(SamplingParams) if s.per_row)
SAMPLING_PARAMS = tuple(s.field for s in PER_ROW)
_FLOATS = {s.field for s in settings_of(SamplingParams) if s.kinds == (float,)}
# messages and chat_template_kwargs are rendered into prompt (convert.py) and leave the table.
COLUMNS = ("custom_id", "url", "body_model", "messages", "chat_template_kwargs", "prompt", "batch_error",
           *(f"body_{param}" for param in SAMPLING_PARAMS))
# Each url's task: one job runs one task, so a batch file's lines must all need the same one.
ENDPOINT_TASKS = {CHAT_URL: "generate", COMPLETIONS_URL: "generate", EMBEDDINGS_URL: "embed", SCORE_URL: "rerank",
                  RERANK_URL: "rerank"}
TABLE_COLUMNS = {"generate": COLUMNS, "embed": EMBED_COLUMNS, "rerank": RERANK_COLUMNS}


class BadRequest(ValueError):
    """A line the batch cannot run; it becomes an error line and the job goes on."""


@dataclass(frozen=True)
class ParsedLine:
    """A line's rows, with only the columns it knows (table_row gives them the table's), and the task its url
    needs (None when the line is too broken to say)."""

    task: str | None
    rows: list[dict[str, Any]]


def parse_line(line: bytes, number: int) -> ParsedLine:
    """A broken line gives one row with `custom_id` (if known) and `batch_error`."""
    custom_id = url = None
    try:
        request = _json_object(line)
        custom_id = _custom_id(request)
        url = _url(request)
        rows = _body_rows(url, request.get("body"))
    except BadRequest as exc:
        rows = [{"batch_error": f"line {number}: {exc}"}]
    line_columns = {"custom_id": custom_id, "url": url, "batch_line": number, "batch_items": len(rows)}
    return ParsedLine(ENDPOINT_TASKS.get(url), [{**row, **line_columns} for row in rows])


def table_row(row: dict[str, Any], task: str) -> dict[str, Any]:
    """The row with exactly the columns of `task`'s request table, so every row of a table has the same ones."""
    return {column: row.get(column) for column in TABLE_COLUMNS[task]}


def _json_object(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"not valid JSON ({exc})") from None
    if not isinstance(request, dict):
        raise BadRequest("not a JSON object")
    return request


def _custom_id(request: dict[str, Any]) -> str:
    custom_id = request.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise BadRequest("custom_id must be a non-empty string")
    return custom_id


def _url(request: dict[str, Any]) -> str:
    url = request.get("url")
    if request.get("method", "POST") != "POST":
        raise BadRequest(f"method must be POST, got {request.get('method')!r}")
    if not isinstance(url, str) or url not in ENDPOINT_TASKS:  # a JSON list or object cannot be looked up
        raise BadRequest(f"unsupported url {url!r}; supported: {', '.join(ENDPOINT_TASKS)}")
    return url


def _body_rows(url: str, body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    if url in BODY_ROWS:
        try:
            rows = BODY_ROWS[url](body)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return [{"body_model": body.get("model"), **row} for row in rows]
    text = _chat(body) if url == CHAT_URL else {"prompt": _prompt(body)}
    sampling = _sampling(body, chat=url == CHAT_URL)
    return [{"body_model": body.get("model"), **text, **{f"body_{p}": v for p, v in sampling.items()}}]


def _chat(body: dict[str, Any]) -> dict[str, Any]:
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise BadRequest("body.chat_template_kwargs must be a JSON object")
    return {"messages": _messages(body), "chat_template_kwargs": kwargs}


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("body.messages must be a non-empty list")
    return [_message(m, i) for i, m in enumerate(messages, 1)]


def _message(message: Any, number: int) -> dict[str, Any]:
    """role and content, and what a conversation with tools holds: an assistant's tool_calls (its content
    may then be null) and a tool message's tool_call_id and name, for the template."""
    kept = {"role": _field(message, "role", number)}
    kept.update({key: message[key] for key in ("tool_calls", "tool_call_id", "name") if message.get(key) is not None})
    kept["content"] = "" if message.get("content") is None and "tool_calls" in kept else _content(message, number)
    return kept


def _content(message: Any, number: int) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: only text parts can be run
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            raise BadRequest(f"body.messages[{number}]: only text content parts are supported")
        content = "".join(str(p.get("text", "")) for p in content)
    if not isinstance(content, str):
        raise BadRequest(f"body.messages[{number}] needs a string content")
    return content


def _field(message: Any, key: str, number: int) -> str:
    value = message.get(key) if isinstance(message, dict) else None
    if not isinstance(value, str):
        raise BadRequest(f"body.messages[{number}] needs a string {key!r}")
    return value


def _prompt(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("body.prompt must be a non-empty string (lists of prompts and token ids are not supported)")
    return prompt


def _sampling(body: dict[str, Any], chat: bool) -> dict[str, Any]:
    values = {param: body.get(param) for param in SAMPLING_PARAMS}
    for param in _FLOATS:  # JSON numbers like 1 must still read back as floats, so the column has one type
        if isinstance(values[param], int) and not isinstance(values[param], bool):
            values[param] = float(values[param])
    if isinstance(values["stop"], str):
        values["stop"] = [values["stop"]]
    if chat:  # chat's own names: max_completion_tokens, and logprobs as a flag with top_logprobs alternatives
        values["max_tokens"] = body.get("max_completion_tokens", values["max_tokens"])
        values["logprobs"] = (body.get("top_logprobs") or 0) if body.get("logprobs") else None
        values.update(_response_format(body.get("response_format")))
    if chat:
        values.update(_tools(body))
    for param in ("json", "tools", "tool_choice"):  # as JSON text: the table's column then has one type
        if isinstance(values[param], (dict, list)):
            values[param] = json.dumps(values[param])
    return values


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's tools and tool_choice, checked here so that a mistake in them is that line's error."""
    try:
        tools = parsed_tools(body.get("tools"))
        check_tool_choice(tools, parsed_tool_choice(body.get("tool_choice")))
    except ValueError as exc:
        raise BadRequest(f"body.{exc}") from None
    return {"tools": tools}


def _response_format(response_format: Any) -> dict[str, Any]:
    """OpenAI's response_format as structured-output settings: json_object, or json_schema's schema."""
    kind = response_format.get("type") if isinstance(response_format, dict) else response_format
    if response_format is None or kind == "text":
        return {}
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise BadRequest("response_format.json_schema.schema must be a JSON object")
        return {"json": json.dumps(schema)}
    raise BadRequest(f"unsupported response_format {kind!r}; supported: text, json_object, json_schema")
