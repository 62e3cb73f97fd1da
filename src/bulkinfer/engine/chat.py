"""Conversations into prompts for ``LLM.chat``, with vLLM's conventions: one conversation or a list of them,
and message content as a string or as OpenAI's list of parts."""

from __future__ import annotations

from typing import Any, Sequence as SequenceOf

from bulkinfer.engine.chat_template import ChatTemplate

Message = dict[str, Any]
# vLLM's chat_template_content_format values; "auto" and "string" both give the template text content.
CONTENT_FORMATS = ("auto", "string", "openai")


def conversations_of(messages: SequenceOf[Message] | SequenceOf[SequenceOf[Message]]) -> list[list[Message]]:
    """A list of conversations, from one conversation (a list of messages) or a list of them."""
    if not messages:
        raise ValueError("messages is empty: give a conversation (a list of messages) or a list of them")
    return [list(messages)] if isinstance(messages[0], dict) else [list(c) for c in messages]


def render_conversations(template: ChatTemplate, conversations: list[list[Message]], content_format: str,
                         **options: Any) -> list[str]:
    """Each conversation as prompt text; ``options`` are ChatTemplate.render's. Raises ValueError naming the
    conversation that could not be rendered."""
    if content_format not in CONTENT_FORMATS:
        raise ValueError(f"chat_template_content_format must be one of {', '.join(CONTENT_FORMATS)}, "
                         f"got {content_format!r}")
    prompts = []
    for number, conversation in enumerate(conversations):
        try:
            if content_format != "openai":
                conversation = [_with_text_content(message) for message in conversation]
            prompts.append(template.render(conversation, **options))
        except ValueError as exc:
            raise ValueError(f"conversation {number}: {exc}") from None
    return prompts


def _with_text_content(message: Message) -> Message:
    """The message with OpenAI-style content parts joined into one string, as vLLM's "string" format does."""
    if not isinstance(message, dict):
        raise ValueError(f"a message must be a dict with role and content, got {type(message).__name__}")
    content = message.get("content")
    if not isinstance(content, list):
        return message
    for part in content:
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValueError(f"only text content parts ({{'type': 'text', 'text': ...}}) are supported, got {kind}")
    return {**message, "content": "\n".join(part["text"] for part in content)}
