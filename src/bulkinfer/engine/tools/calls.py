"""A finished request's tool calls: read out of each sample's answer by the model's tool-call parser, and
given ids that depend only on the request, the sample and the call's place, so a resumed job writes the
same ids again."""

from __future__ import annotations

import hashlib
from typing import Any, Hashable

from bulkinfer.engine.tools.base import ToolCallParser
from bulkinfer.engine.tools.registry import tool_call_parser
from bulkinfer.outputs import CompletionOutput, ToolCall
from bulkinfer.sampling_params import Constraint, SamplingParams
from bulkinfer.tool_params import named_function, parses_calls


class ToolCalls:
    """The engine's tool-call handling for one model: which requests are read for calls, and the grammar of
    a forced call. Requests without tools never reach the parser."""

    def __init__(self, parser_name: str, tokenizer: Any) -> None:
        self.parser: ToolCallParser | None = tool_call_parser(parser_name, tokenizer)

    def constraint(self, params: SamplingParams) -> Constraint | None:
        """The grammar of the calls tool_choice forces, in the parser's format; None when none is forced.
        Raises ValueError when this model has no format to force them in."""
        functions = params.forced_tools
        if functions is None:
            return None
        if self.parser is None:
            raise ValueError("tool_choice required or a named function needs a tool_call_parser: none was given, "
                             "and auto recognises no tool-call format in this model's chat template")
        named = named_function(params.tool_choice) is not None
        return Constraint("grammar", self.parser.forced_calls_grammar(functions, at_most_one=named))

    def read(self, completion: CompletionOutput, answer_ids: list[int], request_id: Hashable,
             params: SamplingParams) -> None:
        """Move a sample's calls out of its text into its tool_calls, when the request carried tools.
        ``answer_ids``: the answer's ids, the reasoning and its markers taken out."""
        if self.parser is None or not parses_calls(params.tool_definitions, params.tool_choice):
            return
        parsed = self.parser.parse(completion.text, answer_ids)
        completion.text = parsed.content or ""
        completion.tool_calls = [ToolCall(call_id(request_id, completion.index, number), call.name, call.arguments)
                                 for number, call in enumerate(parsed.tool_calls)]


def call_id(request_id: Hashable, sample: int, number: int) -> str:
    """OpenAI's form, call_ and 24 hex digits, from the request's id, the sample's index and the call's."""
    return "call_" + hashlib.sha256(repr((request_id, sample, number)).encode()).hexdigest()[:24]
