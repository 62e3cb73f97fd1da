"""The end of a run: stats.json in the output directory, and the same figures as a table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from bulkinfer.cli.metrics import metrics_of
from bulkinfer.durable import write_atomic
from bulkinfer.runner.config import SECRET_SETTINGS, JobConfig
from bulkinfer.runner.job import JobOutcome
from bulkinfer.runner.loop import Snapshot
from bulkinfer.runner.outdir.store_errors import store_errors
from bulkinfer.runner.status import JobStatus
from bulkinfer.runner.shards import Shard
from bulkinfer.runner.storage import filesystem_for, is_remote


def run_stats(config: JobConfig, outcome: JobOutcome, last: Snapshot, wall_seconds: float,
              hourly_cost: float | None) -> dict[str, Any]:
    """Figures of this run (a resumed job counts only what this run did), with the job's totals."""
    m = metrics_of(last)
    stats: dict[str, Any] = {
        "complete": outcome.complete,
        "rows_total": outcome.rows_total,
        "rows_done": outcome.rows_done,
        "rows_failed": outcome.rows_failed,
        "rows_this_run": outcome.rows_done - outcome.rows_at_start,
        "prompt_tokens": m.prompt_tokens,
        "output_tokens": m.output_tokens,
        "reasoning_tokens": m.reasoning_tokens,
        "answer_tokens": m.answer_tokens,
        "wall_seconds": round(wall_seconds, 3),  # the whole command, model loading included
        "engine_seconds": round(m.elapsed, 3),
        "rows_per_second": round(m.rows_per_second, 3),
        "prompt_tokens_per_second": round(m.prompt_tokens_per_second, 1),
        "output_tokens_per_second": round(m.output_tokens_per_second, 1),
        "preemptions": m.preemptions,
        "prefix_cache_hit_rate": round(m.prefix_cache_hit_rate, 4),
        "model_impl": last.engine_stats.model_impl,
        "dtype": last.engine_stats.dtype,
        "dtype_reason": last.engine_stats.dtype_reason,
        "kv_cache_dtype": last.engine_stats.kv_cache_dtype,
        "kv_bytes_per_token": last.engine_stats.kv_bytes_per_token,
        "state_bytes_per_seq": last.engine_stats.state_bytes_per_seq,
        "prefix_caching_off": last.engine_stats.prefix_caching_off,
        "settings": {name: value for name, value in config.settings().items() if name not in SECRET_SETTINGS},
    }
    if hourly_cost is not None:
        stats["hourly_cost"] = hourly_cost
        stats["cost"] = round(hourly_cost * wall_seconds / 3600, 6)
        stats["cost_per_million_output_tokens"] = cost_per_million(hourly_cost, wall_seconds, m.output_tokens)
    return stats


def cost_per_million(hourly_cost: float, seconds: float, tokens: int) -> float | None:
    """What a million tokens cost at this machine price and rate; None when no tokens were made."""
    if tokens <= 0:
        return None
    return round(hourly_cost * seconds / 3600 / tokens * 1e6, 4)


def write_stats(output: Path | str, shard: Shard, stats: dict[str, Any],
                storage_options: dict[str, Any] | None = None) -> str:
    """stats.json, or stats-I-of-N.json for one shard of a split job, beside the job's other files (on
    object storage too, with `storage_options`); returns where."""
    name, data = f"stats{shard.suffix}.json", (json.dumps(stats, indent=2) + "\n").encode()
    if not is_remote(str(output)):
        write_atomic(Path(output) / name, data)
        return str(Path(output) / name)
    url = f"{str(output).rstrip('/')}/{name}"
    with store_errors(url):
        filesystem_for(url, storage_options)[0].pipe_file(url, data)
    return url


def summary_table(stats: dict[str, Any]) -> Table:
    table = Table(title="bulkinfer run", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("rows", f"{stats['rows_done']:,} of {stats['rows_total']:,} ({stats['rows_this_run']:,} this run)")
    table.add_row("model code", stats["model_impl"])
    table.add_row("dtype", f"{stats['dtype']} ({stats['dtype_reason']})")
    table.add_row("KV cache", f"{stats['kv_cache_dtype']}, {stats['kv_bytes_per_token']:,} bytes per token")
    if stats.get("state_bytes_per_seq"):
        table.add_row("recurrent state", f"{stats['state_bytes_per_seq']:,} bytes per sequence")
    table.add_row("errors", f"{stats['rows_failed']:,}")
    table.add_row("tokens", f"{stats['prompt_tokens']:,} prompt, {stats['output_tokens']:,} output")
    if stats.get("reasoning_tokens"):
        table.add_row("output", f"{stats['reasoning_tokens']:,} reasoning, {stats['answer_tokens']:,} answer")
    table.add_row("wall time", f"{stats['wall_seconds']:,.1f} s ({stats['engine_seconds']:,.1f} s generating)")
    table.add_row("throughput", f"{stats['output_tokens_per_second']:,.1f} output tok/s, "
                                f"{stats['prompt_tokens_per_second']:,.1f} prompt tok/s")
    table.add_row("preemptions", f"{stats['preemptions']:,}")
    table.add_row("prefix-cache hits", stats.get("prefix_caching_off") or f"{stats['prefix_cache_hit_rate']:.1%}")
    if stats.get("cost_per_million_output_tokens") is not None:
        table.add_row("cost", f"{stats['cost']:.4f} ({stats['cost_per_million_output_tokens']:.4f} "
                              f"per million output tokens)")
    return table


def rows_done(outcome: JobOutcome | JobStatus) -> str:
    return f"{outcome.rows_done:,} of {outcome.rows_total:,} rows done, {outcome.rows_failed:,} with errors"
