"""Counters for progress displays and job summaries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineStats:
    prompt_tokens: int = 0  # prompt tokens computed (prefix-cache hits excluded)
    generation_tokens: int = 0
    steps: int = 0
    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    preemptions: int = 0
    prefix_cache_queried_tokens: int = 0
    prefix_cache_hit_tokens: int = 0

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hit_tokens / max(self.prefix_cache_queried_tokens, 1)
