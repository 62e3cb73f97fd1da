"""Time each Triton kernel against its PyTorch reference (and torch SDPA where it applies) on CUDA.

Writes ``gpu_kernels.json`` to the output folder: the chip's measured copy bandwidth and matmul
rate (in the chosen dtype, bf16 by default), then one row per (case, implementation) with
milliseconds, achieved GB/s and TFLOP/s, and the Triton output's largest difference from the
reference. Byte and FLOP counts are the work the operation must do (compulsory traffic, useful
FLOPs), the same for every implementation of a case: the rates compare implementations, and set
against the peaks they show the headroom left.

Usage: python scripts/gpu_bench_kernels.py [--out DIR] [--dtype bfloat16|float16] [--dry-run]
``--dry-run`` lists the cases without touching a GPU (for review on a machine without one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

DEFAULT_OUT = Path("benchmarks/results")
KERNELS_JSON = "gpu_kernels.json"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Case:
    """One workload: what it must move and compute, and the implementations that do it."""

    kernel: str
    shape: str
    bytes: float
    flops: float
    impls: dict[str, Callable[[], object]] = field(default_factory=dict)
    error: Callable[[], float] | None = None  # Triton's largest |difference| from the reference


@dataclass(frozen=True)
class AttentionShape:
    label: str
    q_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    block_size: int = 16


ATTENTION_SHAPES = [
    AttentionShape("decode 64 x 2k, 32/8 heads x 128", (1,) * 64, (2048,) * 64),
    AttentionShape("decode 1 x 32k (split-KV)", (1,), (32768,)),
    AttentionShape("decode 256 x 1k, 0.5B heads 14/2 x 64", (1,) * 256, (1024,) * 256, 14, 2, 64),
    AttentionShape("prefill 4 x 2k", (2048,) * 4, (2048,) * 4),
    AttentionShape("extend 8 x (2k cached + 256 new)", (256,) * 8, (2304,) * 8),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16", help="data type (default: bfloat16)")
    parser.add_argument("--dry-run", action="store_true", help="list the cases and exit; needs no GPU")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        for line in describe_cases():
            print(line)
        return 0
    if not torch.cuda.is_available():
        print("gpu_bench_kernels: no CUDA device; use --dry-run to list the cases", file=sys.stderr)
        return 1
    report = run(DTYPES[args.dtype])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / KERNELS_JSON).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / KERNELS_JSON}")
    return 0


def describe_cases() -> list[str]:
    lines = ["peaks: device-to-device copy of 1 GiB; 8192^3 matmul",
             "store_kv, rms_norm(+residual), rotary(q,k), silu_and_mul: 4096 tokens, Llama-8B widths"]
    lines += [f"paged_attention: {shape.label}" for shape in ATTENTION_SHAPES]
    return lines


def run(dtype: torch.dtype) -> dict:
    import triton

    device = torch.device("cuda")
    peaks = measure_peaks(dtype, device)
    rows = []
    for name, build in case_builders():
        rows += time_cases(name, build, dtype, device, peaks)
        torch.cuda.empty_cache()  # each builder's tensors are gone once its rows are in
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"), "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__, "triton": triton.__version__, "dtype": str(dtype).removeprefix("torch."),
        "peaks": peaks, "rows": rows,
    }


def bench_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def measure_peaks(dtype: torch.dtype, device: torch.device) -> dict:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    del src, dst
    a = torch.randn(8192, 8192, dtype=dtype, device=device)
    b = torch.randn(8192, 8192, dtype=dtype, device=device)
    matmul_ms = bench_ms(lambda: torch.matmul(a, b))
    return {"copy_gb_s": 2 * (1 << 30) / copy_ms / 1e6,  # bytes read plus bytes written
            "matmul_tflop_s": 2 * 8192 ** 3 / matmul_ms / 1e9}


def time_cases(name: str, build: Callable, dtype: torch.dtype, device: torch.device, peaks: dict) -> list[dict]:
    """Rows for every case ``build`` makes; a failure becomes a row that says so, not a lost report."""
    try:
        cases = build(dtype, device)
    except Exception:  # noqa: BLE001 - the report must say what broke and carry on
        return [{"kernel": name, "error": traceback.format_exc(limit=3)}]
    rows = []
    for case in cases:
        error = _safe(case.error) if case.error else None
        for impl, fn in case.impls.items():
            rows.append(time_one(case, impl, fn, peaks, error))
    return rows


def time_one(case: Case, impl: str, fn: Callable, peaks: dict, error) -> dict:
    row = {"kernel": case.kernel, "shape": case.shape, "impl": impl}
    try:
        ms = bench_ms(fn)
    except Exception:  # noqa: BLE001
        return row | {"error": traceback.format_exc(limit=3)}
    gb_s, tflop_s = case.bytes / ms / 1e6, case.flops / ms / 1e9
    row |= {"ms": round(ms, 4), "gb_s": round(gb_s, 1), "tflop_s": round(tflop_s, 2),
            "pct_copy_bw": round(100 * gb_s / peaks["copy_gb_s"], 1),
            "pct_matmul": round(100 * tflop_s / peaks["matmul_tflop_s"], 1)}
    if impl.startswith("triton") and error is not None:
        row["max_abs_err_vs_ref"] = error
    return row


def _safe(fn: Callable[[], float]):
    try:
        return round(float(fn()), 5)
    except Exception as exc:  # noqa: BLE001
        return f"failed: {exc!r}"


# ----------------------------------------------------------------------------------------------
# Cases. Widths are Llama-3-8B's (hidden 4096, 32/8 heads of 128, MLP 14336) over 4096 tokens.

TOKENS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 4096, 4096, 32, 8, 128, 14336


def store_kv_cases(dtype: torch.dtype, device: torch.device) -> list[Case]:
    from bulkinfer.kernels.store_kv import store_kv_ref, store_kv_triton

    key = torch.randn(TOKENS, KV_HEADS, HEAD_DIM, dtype=dtype, device=device)
    value = torch.randn_like(key)
    block_size = 16
    caches = [torch.zeros(2 * TOKENS // block_size, block_size, KV_HEADS, HEAD_DIM, dtype=dtype, device=device)
              for _ in range(4)]
    slots = torch.randperm(2 * TOKENS, device=device)[:TOKENS]
    moved = 2 * 2 * key.numel() * key.element_size()  # K and V, each read once and written once

    def error() -> float:
        store_kv_ref(key, value, caches[0], caches[1], slots)
        store_kv_triton(key, value, caches[2], caches[3], slots)
        return (caches[0] - caches[2]).abs().max().item()

    return [Case("store_kv", f"{TOKENS} tokens x {KV_HEADS} x {HEAD_DIM}", moved, 0, {
        "triton": lambda: store_kv_triton(key, value, caches[2], caches[3], slots),
        "torch reference": lambda: store_kv_ref(key, value, caches[0], caches[1], slots),
    }, error)]


def rms_norm_cases(dtype: torch.dtype, device: torch.device) -> list[Case]:
    from bulkinfer.kernels.rms_norm import rms_norm_ref, rms_norm_triton

    x = torch.randn(TOKENS, HIDDEN, dtype=dtype, device=device)
    residual, weight = torch.randn_like(x), torch.randn(HIDDEN, dtype=dtype, device=device)
    moved = 4 * x.numel() * x.element_size()  # x and residual in; output and new residual out
    error = lambda: (rms_norm_triton(x, weight, 1e-6, residual)[0]  # noqa: E731
                     - rms_norm_ref(x, weight, 1e-6, residual)[0]).abs().max().item()
    return [Case("rms_norm+residual", f"{TOKENS} x {HIDDEN}", moved, 0, {
        "triton": lambda: rms_norm_triton(x, weight, 1e-6, residual),
        "torch reference": lambda: rms_norm_ref(x, weight, 1e-6, residual),
    }, error)]


def rotary_cases(dtype: torch.dtype, device: torch.device) -> list[Case]:
    from bulkinfer.kernels.rotary import rotary_ref, rotary_triton
    from bulkinfer.layers.rotary import cos_sin_cache

    table = cos_sin_cache(HEAD_DIM, 8192, 500000.0, None, device)
    positions = torch.randint(0, 8192, (TOKENS,), device=device)
    query = torch.randn(TOKENS, HEADS, HEAD_DIM, dtype=dtype, device=device)
    key = torch.randn(TOKENS, KV_HEADS, HEAD_DIM, dtype=dtype, device=device)
    moved = 2 * (query.numel() + key.numel()) * query.element_size() + TOKENS * HEAD_DIM * 4

    def error() -> float:
        q1, k1, q2, k2 = query.clone(), key.clone(), query.clone(), key.clone()
        rotary_ref(positions, q1, k1, table)
        rotary_triton(positions, q2, k2, table)
        return max((q1 - q2).abs().max().item(), (k1 - k2).abs().max().item())

    # Rotating in place again and again only changes the values, not the work.
    return [Case("rotary(q,k)", f"{TOKENS} tokens, {HEADS}+{KV_HEADS} heads x {HEAD_DIM}", moved, 0, {
        "triton": lambda: rotary_triton(positions, query, key, table),
        "torch reference": lambda: rotary_ref(positions, query, key, table),
    }, error)]


def silu_mul_cases(dtype: torch.dtype, device: torch.device) -> list[Case]:
    from bulkinfer.kernels.silu_mul import silu_and_mul_ref, silu_and_mul_triton

    x = torch.randn(TOKENS, 2 * INTER, dtype=dtype, device=device)
    moved = 1.5 * x.numel() * x.element_size()  # gate and up in, half as much out
    error = lambda: (silu_and_mul_triton(x) - silu_and_mul_ref(x)).abs().max().item()  # noqa: E731
    return [Case("silu_and_mul", f"{TOKENS} x 2*{INTER}", moved, 0, {
        "triton": lambda: silu_and_mul_triton(x),
        "torch reference": lambda: silu_and_mul_ref(x),
    }, error)]


def attention_case(shape: AttentionShape, dtype: torch.dtype, device: torch.device) -> Case:
    from bulkinfer.kernels.paged_attention import paged_attention_ref, paged_attention_triton

    batch = paged_batch(shape, dtype, device)
    hints = dict(max_query_len=max(shape.q_lens), max_seq_len=max(shape.seq_lens))
    impls = {"triton": lambda: paged_attention_triton(**batch, **hints)}
    if max(shape.q_lens) == 1:
        impls["triton, no split"] = lambda: paged_attention_triton(**batch, **hints, num_splits=1)
    impls["torch reference (paged)"] = lambda: paged_attention_ref(**batch)
    impls.update(sdpa_baseline(shape, batch))
    error = lambda: (paged_attention_triton(**batch, **hints)  # noqa: E731
                     - paged_attention_ref(**batch)).float().abs().max().item()
    return Case("paged_attention", shape.label, attention_bytes(shape, dtype), attention_flops(shape), impls, error)


def paged_batch(shape: AttentionShape, dtype: torch.dtype, device: torch.device) -> dict:
    """A cache whose blocks are scattered over the pool, as after many allocations and frees."""
    blocks = [-(-n // shape.block_size) for n in shape.seq_lens]
    order = torch.randperm(sum(blocks), device=device, dtype=torch.int32)
    tables = torch.zeros(len(blocks), max(blocks), dtype=torch.int32, device=device)
    used = 0
    for i, count in enumerate(blocks):
        tables[i, :count] = order[used:used + count]
        used += count
    cache_shape = (sum(blocks), shape.block_size, shape.num_kv_heads, shape.head_dim)
    q_lens = torch.tensor(shape.q_lens, device=device)
    return dict(
        query=torch.randn(sum(shape.q_lens), shape.num_heads, shape.head_dim, dtype=dtype, device=device),
        k_cache=torch.randn(cache_shape, dtype=dtype, device=device),
        v_cache=torch.randn(cache_shape, dtype=dtype, device=device),
        query_start_loc=torch.cat([q_lens.new_zeros(1), q_lens.cumsum(0)]).int(),
        seq_lens=torch.tensor(shape.seq_lens, dtype=torch.int32, device=device),
        block_tables=tables, scale=shape.head_dim ** -0.5)


def sdpa_baseline(shape: AttentionShape, batch: dict) -> dict:
    """torch SDPA over the same keys laid out densely (gathered beforehand, not timed): no paging."""
    if len(set(shape.q_lens)) != 1 or len(set(shape.seq_lens)) != 1:
        return {}
    num_seqs, q_len, seq_len = len(shape.q_lens), shape.q_lens[0], shape.seq_lens[0]
    q = batch["query"].view(num_seqs, q_len, shape.num_heads, shape.head_dim).transpose(1, 2)
    k, v = (dense_keys(batch[name], batch["block_tables"], seq_len) for name in ("k_cache", "v_cache"))
    mask = None
    if q_len > 1 and q_len < seq_len:  # queries are the last q_len positions: bottom-right causal
        pos = torch.arange(seq_len, device=q.device)
        mask = pos[None, :] <= pos[seq_len - q_len:, None]
    causal = q_len > 1 and mask is None
    fn = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
        q, k, v, attn_mask=mask, is_causal=causal, scale=batch["scale"], enable_gqa=True)
    return {"torch SDPA (dense K/V)": fn}


def dense_keys(cache: torch.Tensor, tables: torch.Tensor, seq_len: int) -> torch.Tensor:
    blocks = cache[tables.long()].flatten(1, 2)[:, :seq_len]  # [seqs, seq_len, kv_heads, dim]
    return blocks.transpose(1, 2).contiguous()


def attention_bytes(shape: AttentionShape, dtype: torch.dtype) -> float:
    size = torch.finfo(dtype).bits // 8
    kv = 2 * sum(shape.seq_lens) * shape.num_kv_heads * shape.head_dim
    q_and_out = 2 * sum(shape.q_lens) * shape.num_heads * shape.head_dim
    return (kv + q_and_out) * size


def attention_flops(shape: AttentionShape) -> float:
    # Two matmuls (QK^T and PV) of 2 FLOPs per multiply-add over the keys each query sees.
    visible = sum(q * (s - q) + q * (q + 1) / 2 for q, s in zip(shape.q_lens, shape.seq_lens))
    return 4 * visible * shape.num_heads * shape.head_dim


def case_builders() -> list[tuple[str, Callable[[torch.dtype, torch.device], list[Case]]]]:
    builders = [("store_kv", store_kv_cases), ("rms_norm", rms_norm_cases), ("rotary", rotary_cases),
                ("silu_and_mul", silu_mul_cases)]
    for shape in ATTENTION_SHAPES:  # one builder each, so one shape's failure loses only its rows
        builders.append((f"paged_attention {shape.label}",
                         lambda dtype, device, shape=shape: [attention_case(shape, dtype, device)]))
    return builders


if __name__ == "__main__":
    sys.exit(main())
