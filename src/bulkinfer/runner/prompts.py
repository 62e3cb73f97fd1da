"""What a row asks for: its prompt text (a prompt column, or chat messages rendered with the chat
template), its token ids (encoded in one batch, cut to fit when the job says so) and its sampling
settings (the job's, overridden by the row's param columns)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError
from bulkinfer.errors import UsageError
from bulkinfer.runner.config import LORA_PARAM, JobConfig
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import coerce, settings_of

# No tokenizer averages more than this many characters per token on real text, so a text longer than
# this times max_model_len cannot fit and is refused before it is tokenized.
CHARS_PER_TOKEN = 16
Cut = TypeVar("Cut", str, list[int])  # what cut_to shortens: a prompt's text or its token ids


def prompt_columns(config: JobConfig) -> list[tuple[str, str]]:
    """The (setting, column) a row's prompt comes from: its chat messages, or its prompt text."""
    if config.messages_column:
        return [("messages_column", config.messages_column)]
    return [("prompt_column", config.prompt_column)]


def text_field(values: dict[str, Any], column: str) -> str:
    """A row's text in `column`; ValueError when it has none."""
    if column not in values:
        raise ValueError(f"no {column!r} field")
    value = values[column]
    if not isinstance(value, str):
        raise ValueError(f"{column!r} must be a string, got {type(value).__name__}")
    return value


def bounded(text: str, max_model_len: int, truncate: str | None) -> str:
    """The prompt, or only as much of its kept end as can fit: it is never tokenized whole when it is far
    too long to fit (a 50 MB line would take tens of GB to tokenize). ValueError without `truncate`."""
    limit = CHARS_PER_TOKEN * max_model_len
    kept = cut_to(text, limit, truncate)
    if kept is None:
        raise ValueError(f"prompt is {len(text):,} characters; more than {CHARS_PER_TOKEN} x max_model_len "
                         f"({limit:,}) cannot fit, so it was not tokenized (set truncate to 'left' or 'right' "
                         f"to cut it)")
    return kept


def cut_to(items: Cut, room: int, truncate: str | None) -> Cut | None:
    """The token ids (or characters) within `room`, cut from the side `truncate` says; None when they do not
    fit uncut."""
    if len(items) <= room:
        return items
    if truncate == "left":
        return items[-room:]
    if truncate == "right":
        return items[:room]
    return None


def encode_prompts(tokenizer: Any, texts: list[str], add_special_tokens: bool) -> list[list[int] | str]:
    """Token ids per text; a text the tokenizer fails on gets the error's text instead."""
    if not texts:
        return []
    try:
        # One batch call: the fast tokenizer encodes the batch in parallel in Rust, outside the GIL.
        return tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]
    except Exception:  # noqa: BLE001 - the tokenizer's own errors; one bad text must not fail its window
        return [_encode_one(tokenizer, text, add_special_tokens) for text in texts]


def _encode_one(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int] | str:
    try:
        return tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
    except Exception as exc:  # noqa: BLE001 - see encode_prompts
        return f"{type(exc).__name__}: {exc}"


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
        self.columns = [(declared[param], column) for param, column in config.param_columns.items()
                        if param != LORA_PARAM]  # the row's adapter is runner/adapters.py's

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
