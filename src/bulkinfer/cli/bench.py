"""`bulkinfer bench`: the throughput benchmark, bulkinfer beside transformers' static and continuous batching."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bulkinfer.bench import QUANTIZATIONS, SYSTEMS, WORKLOADS
from bulkinfer.cli.options import given_options, option_parameters
from bulkinfer.engine.config import EngineConfig
from bulkinfer.errors import UsageError
from bulkinfer.settings import Setting, check_choices, setting, settings_of


@dataclass
class BenchSettings:
    model: str = setting("random:50m", "Checkpoint directory, hub id, or random:SHAPE (tiny, 50m, 0.5b, 1.5b, 8b, "
                                       "moe-small, mla-small, mla-50m, hybrid-50m) for random weights.", path=True)
    workload: str = setting("mixed", "mixed (lengths as in real jobs), prefix (a 1,000-token shared prefix) or "
                                     "synthetic (n = 4 samples at temperature 0.8).", choices=WORKLOADS)
    num_requests: int = setting(128, "Requests in the workload.")
    compare: str = setting(",".join(SYSTEMS), "Comma-separated systems to run.")
    repeats: int = setting(3, "Times each system runs, in turn (ABCABC): the report gives the median time and "
                              "the range.")
    structured: str | None = setting(None, "json: run bulkinfer a second time with every request constrained to a "
                                           "small JSON schema, and report both (default: off).", choices=("json",))
    quantization: str | None = setting(None, "fp8, w4a16 or w8a16: run bulkinfer a second time on a copy of the model "
                                             "quantized so, and report its weight bytes and speed beside the "
                                             "unquantized model's (default: off).", choices=QUANTIZATIONS)
    output: Path | None = setting(None, "Also write the report to this JSON file (default: none).")


def bench_settings() -> list[Setting]:
    """The benchmark's own settings, then every engine option (for bulkinfer; dtype and device for all)."""
    return [*settings_of(BenchSettings), *settings_of(EngineConfig)]


def bench_command(**options: Any) -> int:
    given = given_options(options, bench_settings())
    try:
        own = BenchSettings(**{s.name: given.pop(s.name) for s in settings_of(BenchSettings) if s.name in given})
        check_choices(own)
    except ValueError as exc:
        raise UsageError(f"--{exc}") from None
    systems = tuple(name.strip() for name in own.compare.split(",") if name.strip())
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown or not systems:
        raise UsageError(f"--compare: unknown system {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(SYSTEMS)}")
    engine = {s.field: given[s.name] for s in settings_of(EngineConfig) if s.name in given}
    from bulkinfer.bench.run import format_report, run_benchmark, save_report  # torch: only when it runs

    try:
        report = run_benchmark(own.model, own.workload, own.num_requests, compare=systems,
                               structured=own.structured is not None, repeats=own.repeats,
                               quantization=own.quantization, **engine)
    except ValueError as exc:  # an unknown random shape or engine option, or a model that is not there
        raise UsageError(str(exc)) from None
    print(format_report(report))
    if own.output is not None:
        save_report(report, own.output)
    return 0


bench_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    option_parameters(bench_settings()), return_annotation=int)
bench_command.__annotations__ = {p.name: p.annotation for p in bench_command.__signature__.parameters.values()}
