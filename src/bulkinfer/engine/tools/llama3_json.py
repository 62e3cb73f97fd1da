"""Llama 3.1-3.3's JSON calls: {"name": ..., "parameters": {...}} as the whole answer, optionally after
`<|python_tag|>`, several separated by `;`."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.tools.base import ParsedAnswer, ToolCallParser
from bulkinfer.engine.tools.wire import (
    as_call,
    calls_schema,
    content_of,
    lark_calls,
    lark_json,
    read_json,
    text_with_markers,
)
from bulkinfer.outputs import ToolCall

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolCallParser(ToolCallParser):
    name = "llama3_json"

    def parse(self, answer_text: str, answer_ids: list[int]) -> ParsedAnswer:
        text = text_with_markers(self.tokenizer, answer_text, answer_ids, [PYTHON_TAG])
        before, tag, after = text.partition(PYTHON_TAG)
        calls_text = after if tag else before
        calls = _calls_in(calls_text)
        if not calls:
            return ParsedAnswer(content_of(text), [])
        return ParsedAnswer(content_of(before) if tag else None, calls)

    def forced_calls_grammar(self, functions: list[dict[str, Any]], at_most_one: bool) -> str:
        return lark_calls(lark_json(calls_schema(functions, "parameters")), "; ", at_most_one)


def _calls_in(text: str) -> list[ToolCall]:
    """Every call when the whole text is calls separated by `;`, else none: a JSON answer that is not a
    call, or a malformed call, stays content."""
    calls, at = [], 0
    while True:
        found = read_json(text, at)
        call = as_call(found[0]) if found else None
        if call is None:
            return []
        calls.append(call)
        rest = text[found[1]:].lstrip()
        if not rest:
            return calls
        if not rest.startswith(";"):
            return []
        at = len(text) - len(rest) + 1
