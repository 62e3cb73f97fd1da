"""gpt-oss's tool calls: harmony messages addressed `to=functions.NAME`, their content the call's JSON arguments.

gpt-oss writes a call as `<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json
<|message|>{"city": "Paris"}<|call|>` (the recipient may also follow the channel). The reasoning parser leaves
such messages whole in the answer (engine/reasoning/harmony.py); this parser reads them with the same reader
and gives the rest of the answer as content.
"""

from __future__ import annotations

import json
from typing import Any

from bulkinfer.engine.harmony import HarmonyMessage, HarmonyReader, is_function_call
from bulkinfer.engine.tools.base import ParsedAnswer, ToolCallParser
from bulkinfer.outputs import ToolCall

FUNCTIONS = "functions."


class HarmonyToolCallParser(ToolCallParser):
    name = "gpt_oss"

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.reader = HarmonyReader(tokenizer)

    def parse(self, answer_text: str, answer_ids: list[int]) -> ParsedAnswer:
        calls: list[ToolCall] = []
        rest: list[int] = []
        for message in self.reader.read([], answer_ids):
            call = self._call(message)
            if call is not None:
                calls.append(call)
            else:
                rest += message.content_ids if message.is_loose_text else message.written_ids
        if not calls:
            return ParsedAnswer(answer_text or None, [])
        content = self.tokenizer.decode(rest, skip_special_tokens=True)
        return ParsedAnswer(content or None, calls)

    def _call(self, message: HarmonyMessage) -> ToolCall | None:
        """The message as a call; None when it is none, or its arguments are not a JSON object."""
        if not (message.opened and is_function_call(message.recipient)):
            return None
        arguments = self.reader.decode(message.content_ids).strip()
        try:
            if not isinstance(json.loads(arguments), dict):
                return None
        except json.JSONDecodeError:
            return None
        return ToolCall("", message.recipient[len(FUNCTIONS):], arguments)  # ToolCalls gives it its id
