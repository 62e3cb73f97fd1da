"""Hermes-style calls, as Qwen 2.5 and Qwen3 write them: each call a JSON object between `<tool_call>` and
`</tool_call>`, {"name": ..., "arguments": {...}}."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.tools.base import ParsedAnswer, ToolCallParser
from bulkinfer.engine.tools.wire import (
    as_call,
    calls_schema,
    content_of,
    lark_calls,
    lark_json,
    lark_literal,
    read_json,
    text_with_markers,
)
from bulkinfer.outputs import ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesToolCallParser(ToolCallParser):
    name = "hermes"

    def parse(self, answer_text: str, answer_ids: list[int]) -> ParsedAnswer:
        text = text_with_markers(self.tokenizer, answer_text, answer_ids, [OPEN, CLOSE])
        content, calls, at = [], [], 0
        while (start := text.find(OPEN, at)) >= 0:
            content.append(text[at:start])
            end = text.find(CLOSE, start)
            # A call cut by max_tokens has no end tag: its block runs to the end.
            inner_end, block_end = (len(text), len(text)) if end < 0 else (end, end + len(CLOSE))
            call = _call_in(text[start + len(OPEN):inner_end])
            if call is None:
                content.append(text[start:block_end])  # kept as the model wrote it
            else:
                calls.append(call)
            at = block_end
        content.append(text[at:])
        return ParsedAnswer(content_of(*content), calls)

    def forced_calls_grammar(self, functions: list[dict[str, Any]], at_most_one: bool) -> str:
        call = (f'{lark_literal(self.tokenizer, OPEN)} "\\n" {lark_json(calls_schema(functions, "arguments"))} '
                f'"\\n" {lark_literal(self.tokenizer, CLOSE)}')
        return lark_calls(call, "\n", at_most_one)


def _call_in(block: str) -> ToolCall | None:
    found = read_json(block)
    if found is None or block[found[1]:].strip():
        return None
    return as_call(found[0])
