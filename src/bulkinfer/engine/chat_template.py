"""A checkpoint's chat template, rendered as transformers' ``apply_chat_template(..., tokenize=False)`` renders
it, but in bulkinfer's sandbox (engine/chat_sandbox.py): a template that loops without end, takes too long or
builds too much fails the one conversation it renders, with a reason, and the job goes on.

Many small models' templates write only user and assistant turns: a system message given to one would
not reach the model. `drops_system_messages` tells, and rendering such a message warns once."""

from __future__ import annotations

import functools
import logging
from typing import Any

import jinja2

from bulkinfer.engine.chat_sandbox import (
    MIN_OUTPUT_CHARS, OUTPUT_CHARS_PER_INPUT_CHAR, ChatSandbox, TemplateLimitError, rendering)

# Where a continued final message ends, so that what the template writes after it can be cut (as transformers).
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_SYSTEM_PROBE = "bulkinfer-system-probe-7c1e"
log = logging.getLogger(__name__)


class ChatTemplateError(ValueError):
    """A conversation the chat template could not render; the message says why, in one line."""


@functools.lru_cache(maxsize=16)
def _compiled(source: str) -> jinja2.Template:
    return ChatSandbox().compile_template(source)


class ChatTemplate:
    """The tokenizer's chat template (or ``source``, a template in its place), compiled once, and the special
    tokens it may write."""

    def __init__(self, tokenizer: Any, source: str | None = None) -> None:
        """Raises ChatTemplateError if there is no chat template or the template does not compile."""
        try:
            self.source = tokenizer.get_chat_template() if source is None else source
            self.template = _compiled(self.source)
        except (ValueError, jinja2.TemplateError) as exc:
            raise ChatTemplateError(f"chat template failed: {_one_line(exc)}") from None
        self.special_tokens = dict(tokenizer.special_tokens_map)
        self._warned_system = False

    @functools.cached_property
    def drops_system_messages(self) -> bool:
        """Whether a system message's text is missing from what the template writes (a template that
        refuses system messages raises instead, which fails the conversation with its reason)."""
        probe = [{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "hello"}]
        try:
            return _SYSTEM_PROBE not in self._render(probe, True, False)
        except ChatTemplateError:
            return False

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               continue_final_message: bool = False, tools: list[dict[str, Any]] | None = None,
               template_kwargs: dict[str, Any] | None = None) -> str:
        """The conversation as prompt text. ``continue_final_message`` leaves the last message open for the
        model to go on with, instead of starting a new assistant turn. ``template_kwargs`` are more variables
        for the template (``enable_thinking=False``, say), as transformers' ``apply_chat_template(**kwargs)``."""
        if not self._warned_system and _has_system(messages) and self.drops_system_messages:
            self._warned_system = True
            log.warning("warning: the chat template drops system messages, so they do not reach the model")
        return self._render(messages, add_generation_prompt, continue_final_message, tools, template_kwargs)

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool, continue_final_message: bool,
                tools: list[dict[str, Any]] | None = None, template_kwargs: dict[str, Any] | None = None) -> str:
        try:
            messages = _normalized(messages)
            if continue_final_message:
                messages[-1] = {**messages[-1], "content": messages[-1]["content"] + _CONTINUE_TAG}
            variables = {**self.special_tokens, **(template_kwargs or {}), "tools": tools, "documents": None,
                         "add_generation_prompt": add_generation_prompt}
            text = self._generate(messages, variables)
        except TemplateLimitError as exc:
            raise ChatTemplateError(f"chat template stopped: {exc}") from exc
        except Exception as exc:  # templates raise whatever their author chose (often jinja2 errors)
            raise ChatTemplateError(f"chat template failed: {_one_line(exc)}") from exc
        return _cut_at_tag(text) if continue_final_message else text

    def _generate(self, messages: list[dict[str, Any]], variables: dict[str, Any]) -> str:
        # The output budget grows with what the caller gives the template: messages, tools and kwargs.
        size = (sum(len(str(value)) for message in messages for value in message.values())
                + sum(len(str(value)) for name, value in variables.items() if name not in self.special_tokens))
        with rendering(MIN_OUTPUT_CHARS + OUTPUT_CHARS_PER_INPUT_CHAR * size) as budget:
            chunks, length = [], 0
            for chunk in self.template.generate(messages=messages, **variables):
                length += len(chunk)
                budget.check_size(length, "output")
                budget.spend()
                chunks.append(chunk)
            return "".join(chunks)


def _has_system(messages: Any) -> bool:
    return isinstance(messages, list) and any(isinstance(m, dict) and m.get("role") == "system" for m in messages)


def _normalized(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As transformers gives them to templates: keys whose value is None dropped, reasoning under each name."""
    normalized = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in _REASONING_FIELDS if key in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        normalized.append(message)
    return normalized


def _cut_at_tag(text: str) -> str:
    if _CONTINUE_TAG.strip() not in text:
        raise ChatTemplateError("chat template failed: it does not write the final message, so it cannot be continued")
    at = text.rindex(_CONTINUE_TAG.strip())
    return text[:at] if text[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG else text[:at].rstrip()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
