"""What the hybrid models' recurrent kernels cost on the CPU path, against their per-token references.

One layer of each kind at a real model's shape: Qwen3-Next-80B's gated delta rule (32 value heads,
Dk = Dv = 128) and its convolution (8,192 channels, 4 taps), Granite-4.0-H's Mamba2 scan (128 heads
of 64, state 128, 1 group). Steps: one prefill of 256 tokens, and a decode step of 64 sequences
whose slots are shuffled over the pool. One thread, float32, best of N thread CPU times; the
references (token by token, sequence by sequence) run once.

    python benchmarks/hybrid_kernels_cpu.py [--repeats 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bulkinfer.bench.run import save_report
from bulkinfer.kernels import causal_conv1d as conv
from bulkinfer.kernels import gated_delta_rule as gdr
from bulkinfer.kernels import mamba_ssd

PREFILL_TOKENS, DECODE_SEQUENCES = 256, 64


def best_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return round(min(times) * 1e3, 2)


def prefill_layout(pool: int) -> tuple:
    return (torch.tensor([pool - 1]), torch.tensor([0, PREFILL_TOKENS], dtype=torch.int32), torch.tensor([False]))


def delta_steps() -> dict:
    heads, dim = 32, 128
    tokens = max(PREFILL_TOKENS, DECODE_SEQUENCES)
    q, k = (F.normalize(torch.randn(tokens, heads, dim), dim=-1) for _ in range(2))
    v, g, beta = torch.randn(tokens, heads, dim), F.logsigmoid(torch.randn(tokens, heads) + 2), torch.rand(tokens, heads)
    states = torch.zeros(DECODE_SEQUENCES, heads, dim, dim)
    n = PREFILL_TOKENS
    prefill = (q[:n], k[:n], v[:n], g[:n], beta[:n], states, *prefill_layout(DECODE_SEQUENCES), dim ** -0.5)
    b = DECODE_SEQUENCES
    decode = (q[:b], k[:b], v[:b], g[:b], beta[:b], states, torch.randperm(b), dim ** -0.5)
    return {"prefill": (gdr.chunk_gated_delta_rule, gdr.chunk_gated_delta_rule_ref, prefill),
            "decode": (gdr.fused_recurrent_gated_delta_rule_update, gdr.fused_recurrent_gated_delta_rule_update_ref,
                       decode)}


def mamba_steps() -> dict:
    heads, head_dim, state_size = 128, 64, 128
    tokens = max(PREFILL_TOKENS, DECODE_SEQUENCES)
    x, dt = torch.randn(tokens, heads, head_dim), torch.randn(tokens, heads) - 2
    B, C = torch.randn(tokens, 1, state_size), torch.randn(tokens, 1, state_size)
    params = (-torch.rand(heads) * 4 - 0.5, torch.randn(heads), torch.randn(heads))  # A, D, dt_bias
    states = torch.zeros(DECODE_SEQUENCES, heads, head_dim, state_size)
    n, b = PREFILL_TOKENS, DECODE_SEQUENCES

    def args(rows: int) -> tuple:
        return x[:rows], dt[:rows], params[0], B[:rows], C[:rows], params[1], params[2], states

    return {"prefill": (mamba_ssd.mamba_chunk_scan, mamba_ssd.mamba_chunk_scan_ref,
                        (*args(n), *prefill_layout(DECODE_SEQUENCES))),
            "decode": (mamba_ssd.mamba_state_update, mamba_ssd.mamba_state_update_ref,
                       (*args(b), torch.randperm(b)))}


def conv_steps() -> dict:
    channels, taps = 8192, 4
    x, weight, bias = torch.randn(PREFILL_TOKENS, channels), torch.randn(channels, taps), torch.randn(channels)
    states = torch.zeros(DECODE_SEQUENCES, channels, taps - 1)
    return {"prefill": (conv.causal_conv1d_prefill, conv.causal_conv1d_prefill_ref,
                        (x, weight, bias, states, *prefill_layout(DECODE_SEQUENCES))),
            "decode": (conv.causal_conv1d_update, conv.causal_conv1d_update_ref,
                       (x[:DECODE_SEQUENCES], weight, bias, states, torch.randperm(DECODE_SEQUENCES)))}


LAYERS = {"gated delta rule (Qwen3-Next-80B)": delta_steps, "Mamba2 scan (Granite-4.0-H)": mamba_steps,
          "causal conv1d (Qwen3-Next-80B)": conv_steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for layer, build in LAYERS.items():
        for step, (fast, reference, inputs) in build().items():
            cpu_ms = best_ms(lambda: fast(*inputs), args.repeats)
            reference_ms = best_ms(lambda: reference(*inputs), 1)
            rows.append({"layer": layer, "step": step, "cpu_path_ms": cpu_ms, "reference_ms": reference_ms,
                         "speedup": round(reference_ms / cpu_ms, 1)})
            print(json.dumps(rows[-1]), flush=True)
    report = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "threads": 1,
              "prefill_tokens": PREFILL_TOKENS, "decode_sequences": DECODE_SEQUENCES, "rows": rows}
    if args.output:
        save_report(report, Path(args.output))


if __name__ == "__main__":
    main()
