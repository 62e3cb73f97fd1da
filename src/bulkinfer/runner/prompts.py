"""Turn a row's prompt column, or its chat messages, into the text that gets tokenized."""

from __future__ import annotations

from typing import Any

from bulkinfer.runner.config import JobConfig
from bulkinfer.errors import UsageError


class PromptRenderer:
    def __init__(self, config: JobConfig, tokenizer: Any) -> None:
        self.column = config.messages_column or config.prompt_column
        self.chat = config.messages_column is not None
        self.system_prompt = config.system_prompt
        self.tokenizer = tokenizer
        if self.chat and not getattr(tokenizer, "chat_template", None):
            raise UsageError("messages_column is set, but the model's tokenizer has no chat template; "
                             "use prompt_column with ready-made text instead")

    @property
    def adds_special_tokens(self) -> bool:
        """Chat templates write BOS themselves; plain prompts get the tokenizer's special tokens."""
        return not self.chat

    def render(self, values: dict[str, Any]) -> str:
        """Raises ValueError with a readable reason when the row has no usable prompt."""
        if self.column not in values:
            raise ValueError(f"no {self.column!r} field")
        value = values[self.column]
        if value is None:
            raise ValueError(f"{self.column!r} is null")
        if self.chat:
            return self._render_chat(value)
        if not isinstance(value, str):
            raise ValueError(f"{self.column!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            raise ValueError(f"{self.column!r} is empty")
        return value

    def _render_chat(self, messages: Any) -> str:
        _check_messages(self.column, messages)
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # templates raise whatever their author chose (often jinja2 errors)
            raise ValueError(f"chat template failed: {exc}") from None


def _check_messages(column: str, messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{column!r} must be a non-empty list of {{role, content}} messages")
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise ValueError(f"{column!r} message {number} is not an object")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise ValueError(f"{column!r} message {number} needs a string {key!r}")
