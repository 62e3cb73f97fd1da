"""A model's tokenizer for commands that need no engine (inspect, the batch format's chat rendering)."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.tokenizer import load_tokenizer, tokenizer_path
from bulkinfer.errors import UsageError
from bulkinfer.models.checkpoint import resolve_model_path


def model_tokenizer(model: str, tokenizer: str | None = None, revision: str | None = None) -> Any:
    """The tokenizer a job on `model` uses: `tokenizer` (a --tokenizer) when given, else the model's."""
    try:
        return load_tokenizer(tokenizer_path(resolve_model_path(model, revision), tokenizer))
    except ValueError as exc:  # no such model, or an unreadable tokenizer
        raise UsageError(str(exc)) from None
