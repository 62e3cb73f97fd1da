"""What every tool-call parser provides: an answer parted into its plain content and its tool calls, and
the grammar that makes a model write calls in its family's format (tool_choice "required" or a named
function)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from bulkinfer.outputs import ToolCall


@dataclass
class ParsedAnswer:
    content: str | None  # the answer's text outside any tool call; None when there is none
    tool_calls: list[ToolCall]


class ToolCallParser(ABC):
    """One model family's tool-call format (vLLM's `tool_call_parser` names)."""

    name: ClassVar[str]

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @abstractmethod
    def parse(self, answer_text: str, answer_ids: list[int]) -> ParsedAnswer:
        """The tool calls in a finished answer (the reasoning already taken out). A call that does not
        parse stays in content, as text, rather than failing the row."""

    def forced_calls_grammar(self, functions: list[dict[str, Any]], at_most_one: bool) -> str:
        """A Lark grammar (llguidance's dialect) whose every sentence is one or more calls, in this family's
        format, of one of `functions` (OpenAI function definitions) with arguments valid against its
        parameters schema; `at_most_one`: exactly one call. Raises ValueError for a family without one."""
        raise ValueError(f"tool_choice 'required' or a named function is not supported with the {self.name} "
                         "tool-call parser")
