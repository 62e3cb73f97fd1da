"""Quantized weights on the CPU: a random:50m projection multiplied each way the CPU can, by row count;
then the whole random:50m model, plain and quantized (bench --quantization's copies), decoding and
prefilling.

For the gate/up projection of random:50m (512 -> 2,816), int4 in groups of 128, int8 and fp8 with a
scale per row: the plain layer, dequantizing into the compute dtype then multiplying (what
QuantizedLinear does for large batches), and torch's packed kernels (what it does for small
half-precision ones). The model: 16 sequences decoding 32 tokens, and 8 prompts of 256 tokens
prefilled, in bfloat16. One thread, CPU time (best of N for the layer), which a machine shared
with other work hardly moves.

    python benchmarks/quantized_cpu.py [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from bulkinfer.layers.linear import linear
from bulkinfer.layers.quantized_cpu import packed_matmul
from bulkinfer.kernels.fp8_gemm import dequantize_fp8
from bulkinfer.kernels.int_weight_gemm import dequantize_int_weight, pack_int_weight
from bulkinfer.layers.quantized_weights import WeightFormat

OUT, IN = 2816, 512
ROWS = (1, 16, 64, 512)
INT4, INT8 = WeightFormat("int", 4, 128), WeightFormat("int", 8)


def best_us(run, repeats: int = 15) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        run()
        times.append(time.thread_time() - start)
    return round(min(times) * 1e6, 1)


def layer_options(dtype: torch.dtype) -> dict:
    """Each option's matmul x [rows, IN] -> [rows, OUT]."""
    generator = torch.Generator().manual_seed(0)
    plain = torch.randn(OUT, IN, generator=generator).to(dtype)
    q4 = pack_int_weight(torch.randint(0, 16, (OUT, IN), generator=generator, dtype=torch.uint8), 4)
    q8 = pack_int_weight(torch.randint(0, 256, (OUT, IN), generator=generator, dtype=torch.uint8), 8)
    s4, s8 = torch.rand(OUT, IN // 128, dtype=dtype), torch.rand(OUT, 1, dtype=dtype)
    fp8, fp8_scale = plain.float().to(torch.float8_e4m3fn), torch.rand(OUT)
    return {
        "plain": lambda x: linear(x, plain),
        "int4 dequantized": lambda x: linear(x, dequantize_int_weight(q4, s4, None, 128, 4)),
        "int4 packed kernel": lambda x: packed_matmul(x, q4, s4, None, INT4),
        "int8 dequantized": lambda x: linear(x, dequantize_int_weight(q8, s8, None, IN, 8)),
        "int8 packed kernel": lambda x: packed_matmul(x, q8, s8, None, INT8),
        "fp8 dequantized": lambda x: linear(x, dequantize_fp8(fp8, fp8_scale, None, dtype)),
    }


def model_rows(dtype: str = "bfloat16") -> dict:
    """Useful tokens per CPU second of generate() for the plain random:50m model and each quantized copy."""
    import tempfile
    from pathlib import Path

    from bulkinfer import LLM, SamplingParams
    from bulkinfer.bench import QUANTIZATIONS
    from bulkinfer.bench.quantized_model import quantized_checkpoint
    from bulkinfer.bench.random_model import SHAPES, make_random_checkpoint

    plain = make_random_checkpoint(Path(tempfile.gettempdir()) / "bulkinfer-bench" / "50m-float32-ascii", SHAPES["50m"])
    generator = torch.Generator().manual_seed(0)
    decode = [torch.randint(200, 30000, (16,), generator=generator).tolist() for _ in range(16)]
    prefill = [torch.randint(200, 30000, (256,), generator=generator).tolist() for _ in range(8)]
    rows = {}
    for name in ("plain", *QUANTIZATIONS):
        llm = LLM(str(plain if name == "plain" else quantized_checkpoint(plain, name)), dtype=dtype, max_model_len=512)
        llm.generate(decode[:2], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)
        rows[name] = {phase: round(tokens / _cpu_seconds(llm, prompts, max_tokens), 1) for phase, prompts, max_tokens,
                      tokens in (("decode tok/s", decode, 32, 16 * 32), ("prefill tok/s", prefill, 1, 8 * 256))}
        print(f"{name:<6} " + "  ".join(f"{k} {v}" for k, v in rows[name].items()), flush=True)
    return rows


def _cpu_seconds(llm, prompts: list, max_tokens: int) -> float:
    from bulkinfer import SamplingParams

    start = time.process_time()
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True), use_tqdm=False)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="also write the figures to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.processor() or platform.machine(),
              "layer": f"{IN} -> {OUT}", "threads": 1, "microseconds": {}}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        for option, run in layer_options(dtype).items():
            inputs = {rows: torch.randn(rows, IN).to(dtype) for rows in ROWS}
            row = {rows: best_us(lambda run=run, x=x: run(x)) for rows, x in inputs.items()}
            report["microseconds"][f"{name} {option}"] = row
            print(f"{name:<9} {option:<20}" + "".join(f"{rows:>6} rows {us:>10.0f} us" for rows, us in row.items()),
                  flush=True)
    report["model, bfloat16, per CPU second"] = model_rows()
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
