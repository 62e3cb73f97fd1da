"""One benchmark: a model, a workload, and each system timed several times, in turn, in this process."""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bulkinfer.bench import SYSTEMS, systems
from bulkinfer.bench.decode_floor import DecodeProbe
from bulkinfer.bench.peak import (MatmulPeak, copy_bytes_per_s, matmul_params, matmul_peak, model_flops,
                                  model_matmul_shapes, utilisation)
from bulkinfer.bench.quantized_model import quantized_checkpoint
from bulkinfer.bench.random_model import SHAPES, make_random_checkpoint
from bulkinfer.bench.systems import Timing, quiet_third_party_logs
from bulkinfer.bench.workloads import BENCH_SCHEMA, make_workload, prompt_tokens, useful_tokens
from bulkinfer.engine.config import BATCHED_TOKENS, EngineConfig
from bulkinfer.engine.resolve import resolve_device, resolve_dtype
from bulkinfer.models.checkpoint import resolve_model_path
from bulkinfer.models.footprint import footprint
from bulkinfer.models.loader import read_config

TEMPERATURE = {"mixed": 0.0, "prefix": 0.0, "synthetic": 0.8}


def model_path(model: str, dtype: str) -> Path:
    """A checkpoint path, or "random:SHAPE" for random weights of a known shape, cached on disk."""
    if not model.startswith("random:"):
        return resolve_model_path(model)
    shape = model.split(":", 1)[1]
    if shape not in SHAPES:
        raise ValueError(f"unknown random shape {shape!r}; choose from {', '.join(SHAPES)}")
    # "ascii": checkpoints whose tokenizer spells printable ASCII (older ones in the store did not).
    store = Path(tempfile.gettempdir()) / "bulkinfer-bench" / f"{shape}-{dtype}-ascii"
    return make_random_checkpoint(store, SHAPES[shape], dtype="float32" if dtype == "auto" else dtype)


def run_benchmark(model: str, workload: str, num_requests: int, compare: tuple[str, ...] = SYSTEMS,
                  workload_seed: int = 0, structured: bool = False, repeats: int = 3, quantization: str | None = None,
                  **engine_options) -> dict:
    """engine_options: EngineConfig's fields; dtype and device hold for the baselines too. structured:
    bulkinfer runs again with every request constrained to BENCH_SCHEMA, as the system "bulkinfer-json".
    quantization: bulkinfer runs again on a copy of the model quantized so (bench/quantized_model.py), as
    the system "bulkinfer-QUANTIZATION". repeats: rounds, each running every system once, in the same
    order (ABCABC, not AAABBB)."""
    if repeats < 1:
        raise ValueError("--repeats must be at least 1")
    quiet_third_party_logs()
    options = EngineConfig(**engine_options)
    path = model_path(model, options.dtype)
    model_config, _ = read_config(path, options.model_impl)
    torch_device = resolve_device(options.device)
    torch_dtype = resolve_dtype(options.dtype, model_config, torch_device).dtype
    requests = make_workload(workload, num_requests, model_config.vocab_size, workload_seed)
    temperature = TEMPERATURE[workload]
    max_len = max(len(r.prompt) + r.max_tokens for r in requests)
    if unknown := [system for system in compare if system not in SYSTEMS]:
        raise ValueError(f"unknown system {unknown[0]!r}; choose from {', '.join(SYSTEMS)}")
    bulkinfer_options = {**engine_options, "dtype": str(torch_dtype).removeprefix("torch."),
                         "max_model_len": options.max_model_len or max_len}
    runs = {  # each takes whether it is the system's first run
        "bulkinfer": lambda first: systems.run_bulkinfer(path, requests, temperature, probe=first,
                                                         **bulkinfer_options),
        "bulkinfer-json": lambda first: systems.run_bulkinfer(path, requests, temperature, schema=BENCH_SCHEMA,
                                                              **bulkinfer_options),
        "static": lambda first: systems.run_hf_static(path, requests, temperature, torch_dtype, torch_device),
        "continuous": lambda first: systems.run_hf_continuous(path, requests, temperature, torch_dtype,
                                                              torch_device),
    }
    order = (*compare, "bulkinfer-json") if structured else compare
    weights = {"bulkinfer": path}
    if quantization is not None:
        weights[f"bulkinfer-{quantization}"] = quantized = quantized_checkpoint(path, quantization)
        runs[f"bulkinfer-{quantization}"] = lambda first: systems.run_bulkinfer(quantized, requests, temperature,
                                                                                probe=False, **bulkinfer_options)
        order = (*order, f"bulkinfer-{quantization}")
    timings, sequence, failures = _run_in_turn({system: runs[system] for system in order}, repeats)
    peak = matmul_peak(bench_shapes(model_config, options, torch_device, requests), torch_dtype, torch_device)
    report = _report(path, model_config, workload, requests, torch_dtype, torch_device, timings, peak)
    if quantization is not None:
        _compare_weights(report["systems"], weights, model_config)
    report["runs"] = sequence
    report["systems"].update({system: {"error": error} for system, error in failures.items()})
    if probe := next((t.decode for t in timings.get("bulkinfer", []) if t.decode is not None), None):
        report["decode_step"] = _decode_report(probe, copy_bytes_per_s(torch_device))
    return report


def bench_shapes(model_config, options: EngineConfig, device: torch.device, requests) -> list:
    """The model's projections at the steps this bench runs: a full step budget of prompt tokens, and a decode
    step of every sequence at once (as many as max_num_seqs lets run)."""
    decode_rows = min(sum(r.n for r in requests), options.max_num_seqs)
    budget = options.max_num_batched_tokens or BATCHED_TOKENS[device.type]
    return model_matmul_shapes(model_config, (decode_rows, budget), decode_rows)


def _run_in_turn(runs: dict[str, Callable[[bool], Timing]], repeats: int) -> tuple[dict, list, dict]:
    """Every system once per round, in the given order, round after round (ABCABC, not AAABBB), so that a
    machine that warms up, throttles or gets busy meets every system alike. Returns each system's timings,
    every run in order, and why each system that broke broke (it is not run again)."""
    timings: dict[str, list[Timing]] = {}
    sequence: list[dict] = []
    failures: dict[str, str] = {}
    for _ in range(repeats):
        for system, run in runs.items():
            if system in failures:
                continue
            try:
                timing = run(system not in timings)
            except Exception as exc:  # a baseline that breaks is reported, and the others still count
                if system == "bulkinfer":
                    raise
                failures[system] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                continue
            timings.setdefault(system, []).append(timing)
            sequence.append({"system": system, "seconds": round(timing.seconds, 3)})
    return timings, sequence, failures


def _compare_weights(rows: dict, paths: dict[str, Path], model_config) -> None:
    """Each bulkinfer system's weight bytes as its checkpoint stores them, and the quantized one's
    useful tok/s against the unquantized one's."""
    for system, path in paths.items():
        if system in rows:
            rows[system]["weight_bytes"] = footprint(path, read_config(path)[0]).weight_bytes
    base = rows.get("bulkinfer", {}).get("useful_output_tok_s")
    for system in paths:
        if base and system != "bulkinfer" and "useful_output_tok_s" in rows.get(system, {}):
            rows[system]["vs_unquantized"] = round(rows[system]["useful_output_tok_s"] / base, 3)


def _decode_report(probe: DecodeProbe | str, bandwidth: float) -> dict:
    if isinstance(probe, str):
        return {"error": probe}
    return {**probe.report(bandwidth), "copy_gb_s": round(bandwidth / 1e9, 1)}


def _report(path, model_config, workload, requests, dtype, device, timings: dict[str, list[Timing]],
            peak: MatmulPeak) -> dict:
    """Each system's figures from the median of its runs' times, with their range as the spread."""
    useful = useful_tokens(requests)
    layers = model_config.num_layers
    params = matmul_params(model_config)
    rows = {}
    for system, runs in timings.items():
        seconds = [timing.seconds for timing in runs]
        median = statistics.median(seconds)
        timing = sorted(runs, key=lambda t: t.seconds)[(len(runs) - 1) // 2]  # a run at the median: its counts
        flops = model_flops(params, layers, model_config.num_heads * model_config.head_dim, requests,
                            timing.computed_prompt_tokens)
        rows[system] = {
            "seconds": round(median, 3),
            "seconds_min": round(min(seconds), 3),
            "seconds_max": round(max(seconds), 3),
            "repeats": len(seconds),
            "useful_output_tok_s": round(useful / median, 1),
            "total_tok_s": round((useful + prompt_tokens(requests)) / median, 1),
            "generated_tokens": timing.generated_tokens,
            "generated_tok_s": round(timing.generated_tokens / median, 1),
            **utilisation(flops / median / 1e12, peak.tflops),
            **({"grammar": timing.grammar} if timing.grammar else {}),
        }
    base = rows.get("bulkinfer", {}).get("useful_output_tok_s")
    if "bulkinfer-json" in rows and "bulkinfer" in rows:  # generated tokens: a constrained output may end early
        rows["bulkinfer-json"]["vs_unconstrained"] = round(
            rows["bulkinfer-json"]["generated_tok_s"] / rows["bulkinfer"]["generated_tok_s"], 3)
    for name, row in rows.items():
        if base and not name.startswith("bulkinfer"):
            row["bulkinfer_speedup"] = round(base / row["useful_output_tok_s"], 2)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine_name(device), "model": str(path),
        "matmul_params": params, "dtype": str(dtype).removeprefix("torch."), "workload": workload,
        "requests": len(requests), "prompt_tokens": prompt_tokens(requests), "useful_output_tokens": useful,
        **peak.report(), "systems": rows,
    }


def machine_name(device: torch.device) -> str:
    """The GPU's name, or the CPU's architecture and torch's thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def format_report(report: dict) -> str:
    lines = [f"{report['workload']}: {report['requests']} requests, {report['prompt_tokens']} prompt and "
             f"{report['useful_output_tokens']} useful output tokens, {report['dtype']}, {report['machine']}, "
             f"matmul peak {report['peak_matmul_tflops'] * 1000:.0f} GFLOP/s ({peak_shape(report)})"]
    for name, row in report["systems"].items():
        if "error" in row:
            lines.append(f"  {name:<14} failed: {row['error']}")
            continue
        speedup = f"  (bulkinfer {row['bulkinfer_speedup']}x)" if "bulkinfer_speedup" in row else ""
        if "weight_bytes" in row:
            versus = f", {row['vs_unquantized']}x the unquantized tok/s" if "vs_unquantized" in row else ""
            speedup = f"  (weights {row['weight_bytes'] / 2 ** 20:,.1f} MiB{versus})"
        if "vs_unconstrained" in row:
            grammar = row["grammar"]
            speedup = (f"  ({row['vs_unconstrained']:.1%} of unconstrained in generated tok/s; masks "
                       f"{grammar['mask_ms_per_step']:.2f} ms/step at {grammar['rows_per_step']:.0f} rows, "
                       f"{grammar['probe_256']['step_ms']:.2f} ms at 256; {grammar['jump_forward_tokens']} tokens "
                       f"jumped)")
        spread = f"({row['seconds_min']:.2f}-{row['seconds_max']:.2f}, median of {row['repeats']})"
        lines.append(f"  {name:<14} {row['seconds']:>8.2f} s {spread:<26} {row['useful_output_tok_s']:>9.1f} "
                     f"useful tok/s  {mfu_text(row)}{speedup}")
    if decode := report.get("decode_step"):
        lines.append(f"  decode step failed: {decode['error']}" if "error" in decode else
                     f"  decode step  {decode['batch']} sequences of {decode['prompt_tokens']}+ tokens: "
                     f"{decode['step_ms']:.2f} ms, {decode['vs_floor']}x the bandwidth floor of "
                     f"{decode['floor_ms']:.2f} ms (weights and KV cache at {decode['copy_gb_s']} GB/s)")
    return "\n".join(lines)


def peak_shape(report: dict) -> str:
    rows, inputs, outputs = report["peak_shape"]
    return f"best of {report['peak_tries']} on [{rows}, {inputs}] x [{inputs}, {outputs}]"


def mfu_text(row: dict) -> str:
    return f"MFU {row['mfu']:.1%}" if "mfu" in row else f"MFU not given: {row['mfu_error']}"


def save_report(report: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
