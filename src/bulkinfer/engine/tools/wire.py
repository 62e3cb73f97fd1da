"""What the tool-call formats share: JSON calls read out of free text, their special-token markers found
on token ids, and the pieces of the grammars that force calls.

Markers such as `<tool_call>` or `[TOOL_CALLS]` are often special tokens, which the engine's text leaves
out: the answer is decoded again around them from its ids, so they are found however the text was
spelled.
"""

from __future__ import annotations

import json
from typing import Any

from bulkinfer.outputs import ToolCall

_DECODER = json.JSONDecoder()
# The JSON a forced call is written in: one line, as json.dumps writes it (see engine/grammar.py).
_JSON_FORMAT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def marker_id(tokenizer: Any, marker: str) -> int | None:
    """The token id spelling `marker` alone, if the vocabulary has one (an added or special token)."""
    token_id = tokenizer.convert_tokens_to_ids(marker)
    return token_id if isinstance(token_id, int) and token_id != tokenizer.unk_token_id else None


def text_with_markers(tokenizer: Any, answer_text: str, answer_ids: list[int], markers: list[str]) -> str:
    """The answer's text with the markers written in: `answer_text` itself when a marker is in it (a marker
    that is no special token, or one spelled in plain tokens), else the ids decoded piece by piece around
    each marker token, other special tokens (end of turn) left out as the engine's text leaves them. The
    text is preferred because the ids may hold more than the answer: a reasoning model's end-of-thinking
    marker, or what a stop string cut off."""
    by_id = {token_id: marker for marker in markers if (token_id := marker_id(tokenizer, marker)) is not None}
    if any(marker in answer_text for marker in markers) or not any(token in by_id for token in answer_ids):
        return answer_text
    pieces, run = [], []
    for token in answer_ids:
        if token in by_id:
            pieces += [tokenizer.decode(run, skip_special_tokens=True), by_id[token]]
            run = []
        else:
            run.append(token)
    pieces.append(tokenizer.decode(run, skip_special_tokens=True))
    return "".join(pieces)


def read_json(text: str, start: int = 0) -> tuple[Any, int] | None:
    """The JSON value at `start` (after whitespace) and where it ends, or None if none parses there."""
    at = len(text) - len(text[start:].lstrip())
    try:
        return _DECODER.raw_decode(text, at)
    except json.JSONDecodeError:
        return None


def as_call(value: Any, arguments_keys: tuple[str, ...] = ("arguments", "parameters")) -> ToolCall | None:
    """A call from a decoded {"name": ..., "arguments": {...}} object (the id is given later); None if it is
    not one. Arguments written as JSON text are kept as that text."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    key = next((key for key in arguments_keys if key in value), None)
    arguments = {} if key is None else value[key]
    if isinstance(arguments, str):
        return ToolCall("", value["name"], arguments)
    if not isinstance(arguments, dict):
        return None
    return ToolCall("", value["name"], json.dumps(arguments, ensure_ascii=False))


def content_of(*pieces: str) -> str | None:
    text = "".join(pieces).strip()
    return text or None


def lark_literal(tokenizer: Any, text: str) -> str:
    """`text` in a Lark grammar: the token itself when the vocabulary has it as one token (the model must
    write the marker token, not its spelling), else the string."""
    token_id = marker_id(tokenizer, text)
    return f"<[{token_id}]>" if token_id is not None else json.dumps(text)


def calls_schema(functions: list[dict[str, Any]], arguments_key: str) -> dict[str, Any]:
    """A JSON schema of one call object: {"name": NAME, arguments_key: ARGUMENTS} for any of `functions`,
    each call's arguments valid against its function's parameters."""
    options = [{"type": "object",
                "properties": {"name": {"const": f["name"]}, arguments_key: f.get("parameters") or {"type": "object"}},
                "required": ["name", arguments_key], "additionalProperties": False}
               for f in functions]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return {**schema, "x-guidance": _JSON_FORMAT}


def lark_json(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps(schema)


def lark_calls(call: str, separator: str, at_most_one: bool) -> str:
    """A Lark grammar of exactly one `call` (a rule's body), or of one or more separated by `separator`."""
    more = "" if at_most_one else f" ({json.dumps(separator)} call)*"
    return f"start: call{more}\ncall: {call}\n"
