"""Progress displays and the end-of-run figures, from made-up snapshots."""

from __future__ import annotations

import io

from rich.console import Console

from bulkinfer.cli.display import ProgressDisplay, panel
from bulkinfer.cli.metrics import metrics_of
from bulkinfer.cli.summary import cost_per_million, summary_table
from bulkinfer.engine.stats import EngineStats
from bulkinfer.runner.loop import Snapshot

STATS = EngineStats(prompt_tokens=5000, generation_tokens=2000, steps=40, num_running=32, num_waiting=7,
                    kv_blocks_used=25, kv_blocks_total=100, preemptions=3,
                    prefix_cache_queried_tokens=1000, prefix_cache_hit_tokens=250)
SNAPSHOT = Snapshot(rows_total=1000, rows_done=300, rows_failed=2, rows_at_start=100, elapsed=10.0,
                    engine_stats=STATS)


def test_metrics_count_only_this_runs_rows_for_rates_and_eta() -> None:
    m = metrics_of(SNAPSHOT)
    assert m.rows_per_second == 20.0 and m.eta_seconds == 35.0
    assert (m.output_tokens_per_second, m.prompt_tokens_per_second) == (200.0, 500.0)
    assert (m.kv_cache_use, m.prefix_cache_hit_rate, m.running) == (0.25, 0.25, 32)


def test_plain_lines_have_every_figure_and_no_escape_codes() -> None:
    stream = io.StringIO()
    times = iter([0.0, 31.0, 31.0, 32.0])
    display = ProgressDisplay(live=False, interval=30.0, stream=stream, clock=lambda: next(times))
    display.update(SNAPSHOT)  # 31 s after the start: a line
    display.update(SNAPSHOT)  # 1 s later: none
    text = stream.getvalue()
    assert text.count("\n") == 1 and "\x1b" not in text
    for part in ("300/1,000 rows (30.0%)", "2 errors", "200 output tok/s", "500 prompt tok/s", "batch 32",
                 "KV cache 25%", "3 preemptions", "prefix cache hits 25%", "ETA 0m35s"):
        assert part in text, part


def test_live_panel_shows_every_figure() -> None:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(panel(metrics_of(SNAPSHOT)))
    text = console.file.getvalue()
    for part in ("300/1,000 rows", "ETA 0m35s", "output 200 tok/s", "prompt 500 tok/s", "batch 32 running",
                 "KV cache 25%", "preemptions 3", "prefix-cache hits 25%", "errors 2"):
        assert part in text, part


def test_cost_per_million_output_tokens() -> None:
    assert cost_per_million(3.6, 3600, 2_000_000) == 1.8  # $3.60 an hour, 2M tokens in that hour
    assert cost_per_million(3.6, 10, 0) is None


def test_summary_table_renders_cost_and_dtype() -> None:
    stats = {"rows_done": 10, "rows_total": 10, "rows_this_run": 10, "rows_failed": 0, "prompt_tokens": 50,
             "output_tokens": 20, "wall_seconds": 2.0, "engine_seconds": 1.0, "output_tokens_per_second": 20.0,
             "prompt_tokens_per_second": 50.0, "preemptions": 0, "prefix_cache_hit_rate": 0.5, "model_impl": "native",
             "dtype": "bfloat16", "dtype_reason": "auto: this CPU has AVX512-BF16 and AMX",
             "kv_cache_dtype": "float8_e4m3fn", "kv_bytes_per_token": 4096, "cost": 0.001, "cost_per_million_output_tokens": 50.0}
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(summary_table(stats))
    assert "50.0000 per million output tokens" in console.file.getvalue()
    assert "float8_e4m3fn, 4,096 bytes per token" in console.file.getvalue()
    assert "bfloat16 (auto: this CPU has AVX512-BF16 and AMX)" in console.file.getvalue()


def test_plain_lines_go_to_stderr_as_it_is_when_the_run_starts(capsys) -> None:
    # Not the stderr of when the module was imported: a test's capture, or a caller's redirection, may have
    # replaced it since, and the old one may be closed.
    display = ProgressDisplay(live=False, interval=0.0)
    display.update(SNAPSHOT)
    assert capsys.readouterr().err.startswith("bulkinfer: 300/1,000 rows")
