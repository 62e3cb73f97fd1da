"""A model's tokenizer for commands that need no engine (inspect, the batch format's chat rendering)."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.tokenizer import load_tokenizer
from bulkinfer.errors import UsageError
from bulkinfer.models.checkpoint import resolve_model_path


def model_tokenizer(model: str) -> Any:
    try:
        return load_tokenizer(resolve_model_path(model))
    except ValueError as exc:  # no such model, or an unreadable tokenizer
        raise UsageError(str(exc)) from None
