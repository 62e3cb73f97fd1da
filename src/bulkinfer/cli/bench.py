"""`bulkinfer bench`: the throughput benchmark, bulkinfer beside transformers' static and continuous batching."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bulkinfer.bench.run import SYSTEMS, format_report, run_benchmark, save_report
from bulkinfer.bench.workloads import WORKLOADS
from bulkinfer.errors import UsageError


def bench_command(
    model: str = typer.Option("random:tiny", "--model", help="Checkpoint directory, hub id, or random:SHAPE "
                                                             "(tiny, 50m, 0.5b, 1.5b) for random weights."),
    workload: str = typer.Option("mixed", "--workload", help=f"One of {', '.join(WORKLOADS)}."),
    num_requests: int = typer.Option(256, "--num-requests", min=1, help="Requests in the workload."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, float32, float16 or bfloat16."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda[:N]."),
    compare: str = typer.Option(",".join(SYSTEMS), "--compare", help="Comma-separated systems to run."),
    output: Optional[Path] = typer.Option(None, "--output", show_default=False,
                                          help="Also write the report to this JSON file (default: none)."),
) -> int:
    systems = tuple(name.strip() for name in compare.split(",") if name.strip())
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown or not systems:
        raise UsageError(f"--compare: unknown system {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(SYSTEMS)}")
    if workload not in WORKLOADS:
        raise UsageError(f"--workload must be one of {', '.join(WORKLOADS)}, got {workload!r}")
    try:
        report = run_benchmark(model, workload, num_requests, dtype=dtype, device=device, compare=systems)
    except ValueError as exc:  # an unknown random shape, dtype or device, or a model that is not there
        raise UsageError(str(exc)) from None
    print(format_report(report))
    if output is not None:
        save_report(report, output)
    return 0
