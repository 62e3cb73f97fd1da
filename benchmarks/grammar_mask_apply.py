"""Applying structured outputs' token masks to a step's logits: the engine's way against a baseline.

The engine adds 0 or -inf to each logit from a table indexed by the packed mask's bytes
(GrammarMasks.apply). The baseline unpacks the bits to a boolean mask and fills with it, the
straightforward way. Masks are random words, filled before the timing; each repetition gets fresh
logits, as a step does. Reports the median milliseconds per step for each rows x vocabulary size.

    python benchmarks/grammar_mask_apply.py [--device cpu|cuda] [--repeats 30] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import Future

import torch

from bulkinfer.bench.run import machine_name
from bulkinfer.engine.grammar_masks import GrammarMasks, PendingMasks

ROWS = (16, 64, 256)
VOCAB_SIZES = (32000, 152064)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--output", help="also write the report to this JSON file")
    args = parser.parse_args()
    device = torch.device(args.device)
    results = [_case(rows, vocab_size, device, args.repeats) for vocab_size in VOCAB_SIZES for rows in ROWS]
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "device": machine_name(device), "repeats": args.repeats,
              "results": results}
    for row in results:
        print(f"{row['rows']:>4} rows x {row['vocab_size']:>6} tokens: engine {row['engine_ms']:7.2f} ms, "
              f"unpack and masked_fill {row['unpack_fill_ms']:7.2f} ms")
    if args.output:
        with open(args.output, "w") as file:
            file.write(json.dumps(report, indent=2) + "\n")


def _case(rows: int, vocab_size: int, device: torch.device, repeats: int) -> dict:
    masks = GrammarMasks(vocab_size, rows, device)
    generator = torch.Generator().manual_seed(rows)
    masks.bitmask.copy_(torch.randint(-2**31, 2**31 - 1, masks.bitmask.shape, dtype=torch.int32, generator=generator))
    done = Future()
    done.set_result(0.0)
    base = torch.randn(rows, vocab_size, generator=generator).to(device)
    engine = _median_ms(lambda logits: masks.apply(PendingMasks(list(range(rows)), done), logits), base, repeats)
    bits = torch.tensor([1 << i if i < 31 else -(1 << 31) for i in range(32)], dtype=torch.int32, device=device)

    def unpack_fill(logits: torch.Tensor) -> None:
        words = masks.bitmask.to(device)
        forbidden = ((words[:, :, None] & bits) == 0).flatten(1)[:, :vocab_size]
        logits.masked_fill_(forbidden, float("-inf"))

    masks.close()
    return {"rows": rows, "vocab_size": vocab_size, "engine_ms": engine,
            "unpack_fill_ms": _median_ms(unpack_fill, base, repeats)}


def _median_ms(apply, base: torch.Tensor, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        logits = base.clone()
        _synchronize(base.device)
        start = time.perf_counter()
        apply(logits)
        _synchronize(base.device)
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times[1:]), 3)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
