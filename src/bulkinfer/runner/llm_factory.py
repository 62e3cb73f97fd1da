"""Build the engine from a job's settings."""

from __future__ import annotations

from typing import Any

from bulkinfer import LLM
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.errors import UsageError


def load_llm(config: JobConfig) -> LLM:
    options: dict[str, Any] = dict(
        dtype=config.dtype, device=config.device, max_num_seqs=config.max_num_seqs, block_size=config.block_size,
        max_model_len=config.max_model_len, enable_prefix_caching=config.enable_prefix_caching,
        attention_backend=config.attention_backend, num_kv_blocks=config.num_kv_blocks,
    )
    if config.max_num_batched_tokens is not None:
        options["max_num_batched_tokens"] = config.max_num_batched_tokens
    try:
        return LLM(config.model, **options)
    except ValueError as exc:  # the engine's refusals of a checkpoint or of engine settings
        raise UsageError(f"cannot load {config.model}: {exc}") from None
