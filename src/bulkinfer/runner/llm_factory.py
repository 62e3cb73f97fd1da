"""Build the engine from a job's settings."""

from __future__ import annotations

from typing import Any

from bulkinfer import LLM
from bulkinfer.runner.config import JobConfig
from bulkinfer.errors import UsageError


# JobConfig fields passed to LLM under the same name; a None leaves the engine's own default.
ENGINE_OPTIONS = ("dtype", "device", "max_num_seqs", "max_num_batched_tokens", "num_kv_blocks", "block_size",
                  "max_model_len", "enable_prefix_caching", "attention_backend", "kv_cache_memory_gb",
                  "gpu_memory_utilization", "enforce_eager", "tensor_parallel_size")


def load_llm(config: JobConfig) -> LLM:
    options: dict[str, Any] = {name: getattr(config, name) for name in ENGINE_OPTIONS
                               if getattr(config, name) is not None}
    try:
        return LLM(config.model, **options)
    except ValueError as exc:  # the engine's refusals of a checkpoint or of engine settings
        raise UsageError(f"cannot load {config.model}: {exc}") from None
