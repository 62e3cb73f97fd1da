"""What a row asks for: its prompt text (a prompt column, or chat messages rendered with the chat
template) and its sampling settings (the job's, overridden by the row's param columns)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError
from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import coerce, settings_of


class PromptRenderer:
    def __init__(self, config: JobConfig, tokenizer: Any) -> None:
        self.column = config.messages_column or config.prompt_column
        self.chat = config.messages_column is not None
        self.system_prompt = config.system_prompt
        self.template_kwargs = config.chat_template_kwargs
        self.sampling = config.sampling
        self.tokenizer = tokenizer
        self.chat_template = _chat_template(config, tokenizer) if self.chat else None
        if self.system_prompt is not None and self.chat_template.drops_system_messages:
            raise UsageError("system_prompt: the chat template drops system messages, so it would not reach the "
                             "model; pass a chat_template that writes them, or put it in the user messages")

    @property
    def adds_special_tokens(self) -> bool:
        """Chat templates write BOS themselves; plain prompts get the tokenizer's special tokens."""
        return not self.chat

    def render(self, values: dict[str, Any], params: SamplingParams | None = None) -> str:
        """Raises ValueError with a readable reason when the row has no usable prompt. ``params``: the row's
        sampling settings, whose tools and template variables go to the chat template (default: the job's)."""
        if self.column not in values:
            raise ValueError(f"no {self.column!r} field")
        value = values[self.column]
        if value is None:
            raise ValueError(f"{self.column!r} is null")
        if self.chat:
            return self._render_chat(value, params or self.sampling)
        if not isinstance(value, str):
            raise ValueError(f"{self.column!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            raise ValueError(f"{self.column!r} is empty")
        return value

    def _render_chat(self, messages: Any, params: SamplingParams) -> str:
        _check_messages(self.column, messages)
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        # The job's chat_template_kwargs win over what the settings tell the template (reasoning_effort).
        variables = {**params.template_variables, **(self.template_kwargs or {})}
        # A ValueError naming why it could not.
        return self.chat_template.render(messages, tools=params.tool_definitions, template_kwargs=variables)


def _chat_template(config: JobConfig, tokenizer: Any) -> ChatTemplate:
    """The job's chat_template file when given, else the tokenizer's."""
    if config.chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise UsageError("messages_column is set, but the model's tokenizer has no chat template; "
                         "pass a chat_template file, or use prompt_column with ready-made text instead")
    where = (f"chat_template {config.chat_template}: " if config.chat_template
             else "messages_column is set, but the model's ")
    try:
        source = Path(config.chat_template).read_text() if config.chat_template else None
        return ChatTemplate(tokenizer, source)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}cannot be read ({exc})") from None
    except ChatTemplateError as exc:
        raise UsageError(f"{where}{exc}") from None


def _check_messages(column: str, messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{column!r} must be a non-empty list of {{role, content}} messages")
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise ValueError(f"{column!r} message {number} is not an object")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise ValueError(f"{column!r} message {number} needs a string {key!r}")


class RowSettings:
    """Each row's SamplingParams: the job's settings, the row's own values from param_columns, its seed."""

    def __init__(self, config: JobConfig) -> None:
        self.base = config.sampling
        self.job_seed = config.sampling.seed
        declared = {s.name: s for s in settings_of(SamplingParams)}  # param_columns use the flat names
        self.columns = [(declared[param], column) for param, column in config.param_columns.items()]

    def for_row(self, index: int, values: dict[str, Any]) -> SamplingParams:
        """Raises ValueError with a readable reason when a row's value is unusable."""
        overrides = {}
        for setting, column in self.columns:
            value = values.get(column)
            if value is not None:
                try:
                    overrides[setting.field] = coerce(setting, value)
                except ValueError as exc:
                    raise ValueError(f"column {column!r} ({setting.name}) {exc}") from None
        if "seed" not in overrides and self.job_seed is not None:
            # Seeding per row makes a row's sample independent of which rows shared its batch.
            overrides["seed"] = self.job_seed + index
        if not overrides:
            return self.base
        try:
            return dataclasses.replace(self.base, **overrides)
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc)) from None
