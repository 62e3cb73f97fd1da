"""A stage's `prompt_template` and `messages_template`: text with `{column}` placeholders over the
columns earlier stages wrote, rendered per row into the prompt (or chat messages) the stage's model reads.

    prompt_template = "Rate this answer from 1 to 10: {generated_text}"
    messages_template = [{role = "user", content = "Question: {prompt}\nAnswer: {generated_text}"}]

A placeholder is a column's name and nothing else (no `{a.b}`, `{a[0]}`: those would read attributes
of a row's values); `{{` and `}}` are literal braces. A row that lacks a column, or has no value in it,
cannot be rendered: it becomes that row's error row.
"""

from __future__ import annotations

import string
from typing import Any

from bulkinfer.errors import UsageError


class Template:
    """One text with placeholders; render(row) -> the text, or ValueError saying which column is missing."""

    def __init__(self, text: str, what: str) -> None:
        self.text, self.what = text, what
        try:
            parts = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise UsageError(f"{what} {text!r}: {exc}") from None
        self.columns = [name for _, name, _, _ in parts if name is not None]
        for _, name, spec, conversion in parts:
            if name is not None and (not name.isidentifier() or spec or conversion):
                raise UsageError(f"{what} {text!r}: placeholder {{{name}{'!' + conversion if conversion else ''}"
                                 f"{':' + spec if spec else ''}}} is not a column name; write {{column}}")

    def render(self, row: dict[str, Any]) -> str:
        for name in self.columns:
            if row.get(name) is None:
                raise ValueError(f"{self.what}: the row has no {'column' if name not in row else 'value in'} "
                                 f"{name!r}")
        return self.text.format(**{name: _text(row[name]) for name in self.columns})


class MessagesTemplate:
    """A chat: a list of {role, content} tables, each content a Template."""

    def __init__(self, messages: Any, what: str = "messages_template") -> None:
        if not isinstance(messages, list) or not messages or not all(
                isinstance(message, dict) and set(message) == {"role", "content"}
                and all(isinstance(value, str) for value in message.values()) for message in messages):
            raise UsageError(f"{what} must be a list of {{role = \"...\", content = \"...\"}} tables")
        self.messages = [(message["role"], Template(message["content"], what)) for message in messages]

    def render(self, row: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": role, "content": content.render(row)} for role, content in self.messages]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)
