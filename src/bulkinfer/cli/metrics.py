"""The figures a running job is watched by, computed once from a runner Snapshot for every display."""

from __future__ import annotations

from dataclasses import dataclass

from bulkinfer.runner.loop import Snapshot


@dataclass(frozen=True)
class Metrics:
    rows_total: int
    rows_done: int
    rows_failed: int
    elapsed: float  # seconds this run has been in its engine loop
    rows_per_second: float
    prompt_tokens: int  # computed by this run's engine (prefix-cache hits excluded)
    output_tokens: int
    reasoning_tokens: int  # of finished samples' output tokens, a thinking model's reasoning
    answer_tokens: int  # and the rest
    prompt_tokens_per_second: float
    output_tokens_per_second: float
    running: int  # sequences in the engine's running batch
    waiting: int
    kv_cache_use: float  # share of KV-cache blocks in use
    preemptions: int
    prefix_cache_hit_rate: float
    eta_seconds: float | None  # None until a row has finished in this run

    @property
    def share_done(self) -> float:
        return self.rows_done / self.rows_total if self.rows_total else 1.0


def metrics_of(snapshot: Snapshot) -> Metrics:
    stats = snapshot.engine_stats
    elapsed = max(snapshot.elapsed, 1e-9)
    rows_per_second = (snapshot.rows_done - snapshot.rows_at_start) / elapsed
    rows_left = snapshot.rows_total - snapshot.rows_done
    return Metrics(
        rows_total=snapshot.rows_total, rows_done=snapshot.rows_done, rows_failed=snapshot.rows_failed,
        elapsed=snapshot.elapsed, rows_per_second=rows_per_second,
        prompt_tokens=stats.prompt_tokens, output_tokens=stats.generation_tokens,
        reasoning_tokens=stats.reasoning_tokens, answer_tokens=stats.answer_tokens,
        prompt_tokens_per_second=stats.prompt_tokens / elapsed,
        output_tokens_per_second=stats.generation_tokens / elapsed,
        running=stats.num_running, waiting=stats.num_waiting,
        kv_cache_use=stats.kv_blocks_used / stats.kv_blocks_total if stats.kv_blocks_total else 0.0,
        preemptions=stats.preemptions, prefix_cache_hit_rate=stats.prefix_cache_hit_rate,
        eta_seconds=rows_left / rows_per_second if rows_per_second > 0 else None,
    )


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
