"""Mistral's calls: `[TOOL_CALLS]` followed by a JSON list of {"name": ..., "arguments": {...}}."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.tools.base import ParsedAnswer, ToolCallParser
from bulkinfer.engine.tools.wire import (
    as_call,
    calls_schema,
    content_of,
    lark_json,
    lark_literal,
    read_json,
    text_with_markers,
)

MARKER = "[TOOL_CALLS]"


class MistralToolCallParser(ToolCallParser):
    name = "mistral"

    def parse(self, answer_text: str, answer_ids: list[int]) -> ParsedAnswer:
        text = text_with_markers(self.tokenizer, answer_text, answer_ids, [MARKER])
        before, marker, after = text.partition(MARKER)
        found = read_json(after) if marker else None
        listed = found[0] if found and isinstance(found[0], list) else []
        calls = [as_call(item) for item in listed]
        if not calls or None in calls:
            return ParsedAnswer(content_of(text), [])
        return ParsedAnswer(content_of(before, after[found[1]:]), calls)

    def forced_calls_grammar(self, functions: list[dict[str, Any]], at_most_one: bool) -> str:
        schema = calls_schema(functions, "arguments")
        items = {"type": "array", "items": schema, "minItems": 1, "x-guidance": schema["x-guidance"]}
        if at_most_one:
            items["maxItems"] = 1
        return f"start: {lark_literal(self.tokenizer, MARKER)} {lark_json(items)}\n"
