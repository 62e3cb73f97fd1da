"""Embedding throughput: bulkinfer's ``LLM.embed`` and embed job against sentence-transformers' ``encode``.

    python benchmarks/embed_speed.py --shape 50m --texts 2000 --dtype float32 --dtype bfloat16 \\
        --output benchmarks/results/cpu-50m-embed-2000.json

Both systems load one sentence-transformers model directory (random weights of a bench shape, a Pooling module,
the bench's one-token-per-character tokenizer), built here, so nothing downloads. Before any timing, both embed a
few texts and must agree within a tolerance: a speed ratio between two different computations means nothing.

The workload is a fixed-seed set of texts whose token lengths spread log-normally between 16 and 512, as real
corpora do. Each system runs with its defaults (sentence-transformers: batches of 32 texts, sorted by length;
bulkinfer: its scheduler's step budget), in this process, with the torch threads fixed. The first pass over the
texts is reported apart; then ``--repeats`` warm passes, the systems taking turns, and the best one counts.
Throughput is the texts' tokens per second. ``--job`` also times ``bulkinfer run --task embed`` on the same
texts in a Parquet file, in a subprocess, start-up included. ``--profile`` adds one more pass of each system
under ``torch.profiler`` and splits its time into matmuls, attention and the rest, with the ratio bulkinfer would
reach if everything but its matmuls and attention took no time. It is a script beside ``bulkinfer bench`` rather
than one of its systems: the bench's workloads, baselines and figures (output tokens, the decode probe, MFU)
are generation's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from bulkinfer import LLM
from bulkinfer.bench.random_model import (
    SHAPES,
    make_random_checkpoint,
    make_sentence_transformer,
)
from bulkinfer.bench.systems import quiet_third_party_logs

# Agreement of the unit-length embeddings, element by element: fp32 as the parity tests hold it; bf16 rounds
# every layer's output to 8 bits of mantissa, in a different order in each system.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
MIN_TOKENS, MAX_TOKENS = 16, 512


def embedding_model(shape: str, pooling: str, store: Path) -> Path:
    """A sentence-transformers directory on a random checkpoint of ``shape``, cached in ``store``."""
    path = store / f"{shape}-{pooling}"
    if not (path / "modules.json").is_file():
        source = make_random_checkpoint(store / f"{shape}-source", SHAPES[shape])
        make_sentence_transformer(path, source, pooling)
    return path


def make_texts(count: int, seed: int) -> list[str]:
    """Texts of printable ASCII whose lengths in characters, and so in the bench tokenizer's tokens, are
    log-normal around 128, clipped to [16, 512]."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(128), 0.8, count), MIN_TOKENS, MAX_TOKENS).astype(int)
    alphabet = np.array([chr(code) for code in range(33, 127)])  # no spaces: a tokenizer may fold them
    return ["".join(rng.choice(alphabet, length)) for length in lengths]


def agreement(ours: list[list[float]], theirs: np.ndarray) -> float:
    """The largest difference between the two systems' embeddings once both are unit length."""
    ours_unit = torch.nn.functional.normalize(torch.tensor(ours, dtype=torch.float32), dim=-1)
    theirs_unit = torch.nn.functional.normalize(torch.as_tensor(theirs, dtype=torch.float32), dim=-1)
    return float((ours_unit - theirs_unit).abs().max())


def time_passes(systems: dict[str, Callable[[list[str]], object]], texts: list[str], tokens: int,
                repeats: int) -> dict[str, dict]:
    """Each system's first pass, then ``repeats`` warm rounds in which the systems take turns."""
    seconds = {name: [] for name in systems}
    for _ in range(1 + repeats):
        for name, encode in systems.items():
            started = time.perf_counter()
            encode(texts)
            seconds[name].append(time.perf_counter() - started)
            print(f"{name}: {tokens / seconds[name][-1]:.0f} tok/s", file=sys.stderr, flush=True)  # long runs
    return {name: {"first_seconds": round(times[0], 4), "first_tok_s": round(tokens / times[0], 1),
                   "warm_seconds": [round(t, 4) for t in times[1:]],
                   "warm_tok_s": round(tokens / min(times[1:]), 1)}
            for name, times in seconds.items()}


# Operators by own time (torch.profiler's names): sentence-transformers' linear layers are aten::mm/addmm,
# bulkinfer's oneDNN's; both attend through scaled_dot_product_attention's CPU kernels.
MATMUL_OPS = ("aten::mm", "aten::addmm", "mkldnn::_linear_pointwise")
ATTENTION_MARK = "scaled_dot_product"


def time_split(encode: Callable[[list[str]], object], texts: list[str]) -> dict:
    """One pass under torch.profiler: seconds of own CPU time in matmuls, in attention, and in the rest."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        encode(texts)
    split = {"matmul_seconds": 0.0, "attention_seconds": 0.0, "other_seconds": 0.0}
    for event in profiler.key_averages():
        kind = ("matmul" if event.key in MATMUL_OPS else "attention" if ATTENTION_MARK in event.key else "other")
        split[f"{kind}_seconds"] += event.self_cpu_time_total / 1e6
    return {name: round(seconds, 3) for name, seconds in split.items()}


def profile_systems(systems: dict[str, Callable[[list[str]], object]], texts: list[str]) -> dict:
    """Each system's split, and the ceiling on bulkinfer's ratio its own matmuls and attention set."""
    splits = {name: time_split(encode, texts) for name, encode in systems.items()}
    theirs = sum(splits["sentence-transformers"].values())
    ours = splits["bulkinfer"]
    ceiling = theirs / (ours["matmul_seconds"] + ours["attention_seconds"])
    return {"systems": splits, "ratio_ceiling": round(ceiling, 3)}


def compare_in_process(path: Path, texts: list[str], dtype: str, repeats: int, profiled: bool = False) -> dict:
    """sentence-transformers and ``LLM.embed`` on the same texts: their agreement, then their speeds."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", model_kwargs={"dtype": getattr(torch, dtype)})
    llm = LLM(str(path), dtype=dtype, device="cpu")
    systems = {"sentence-transformers": lambda batch: model.encode(batch, show_progress_bar=False),
               "bulkinfer": lambda batch: llm.embed(batch, use_tqdm=False)}
    probe = texts[:4]
    difference = agreement([out.outputs.embedding for out in llm.embed(probe, use_tqdm=False)],
                           model.encode(probe, show_progress_bar=False))
    if difference > TOLERANCE[dtype]:
        raise SystemExit(f"the two systems disagree by {difference:.2e} (tolerance {TOLERANCE[dtype]:.0e}) in "
                         f"{dtype}: not timing two different computations")
    tokens = sum(len(llm.tokenizer(text)["input_ids"]) for text in texts)
    timings = time_passes(systems, texts, tokens, repeats)
    run = {"dtype": dtype, "agreement_max_abs": difference, "tokens": tokens, "systems": timings,
           "bulkinfer_over_sentence_transformers": round(timings["bulkinfer"]["warm_tok_s"]
                                                         / timings["sentence-transformers"]["warm_tok_s"], 3)}
    return {**run, "profile": profile_systems(systems, texts)} if profiled else run


def time_job(path: Path, texts: list[str], dtype: str, tokens: int, workdir: Path) -> dict:
    """``bulkinfer run --task embed`` on the texts as a Parquet file: wall time of the whole command."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = workdir / f"texts-{dtype}.parquet"
    pq.write_table(pa.table({"prompt": texts}), data)
    command = [sys.executable, "-m", "bulkinfer", "run", "--task", "embed", "--model", str(path), "--input",
               str(data), "--output", str(workdir / f"job-{dtype}"), "--dtype", dtype, "--device", "cpu"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        raise SystemExit(f"the embed job failed: {reason}")
    return {"seconds": round(seconds, 3), "tok_s": round(tokens / seconds, 1),
            "command": shlex.join(command[2:])}


def machine(load_at_start: tuple[float, ...]) -> dict:
    """Where the figures come from, and how busy it was before and after: other work on the CPU moves them."""
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "load_average_at_start": [round(load, 2) for load in load_at_start],
            "load_average": [round(load, 2) for load in os.getloadavg()],
            "python": platform.python_version(), "torch": torch.__version__}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="50m", choices=sorted(SHAPES), help="the random model's shape")
    parser.add_argument("--pooling", default="mean", choices=("mean", "lasttoken", "cls"))
    parser.add_argument("--texts", type=int, default=2000, help="how many texts")
    parser.add_argument("--seed", type=int, default=0, help="the texts' seed")
    parser.add_argument("--dtype", action="append", choices=sorted(TOLERANCE),
                        help="repeatable (default: float32)")
    parser.add_argument("--repeats", type=int, default=3, help="warm passes per system; the best counts")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads for both systems")
    parser.add_argument("--job", action="store_true", help="also time bulkinfer run --task embed")
    parser.add_argument("--profile", action="store_true",
                        help="also split one pass of each system into matmuls, attention and the rest")
    parser.add_argument("--store", type=Path, default=Path(tempfile.gettempdir()) / "bulkinfer-bench" / "embed",
                        help="where the model directory is built and kept")
    parser.add_argument("--output", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.texts < 4:
        parser.error("--repeats must be at least 1 and --texts at least 4")
    load_at_start = os.getloadavg()
    quiet_third_party_logs()
    torch.set_num_threads(args.threads)
    # The job's subprocess runs with as many threads, so that it competes on the same CPU terms.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    path = embedding_model(args.shape, args.pooling, args.store)
    texts = make_texts(args.texts, args.seed)
    runs = []
    for dtype in args.dtype or ["float32"]:
        run = compare_in_process(path, texts, dtype, args.repeats, args.profile)
        if args.job:
            run["job"] = time_job(path, texts, dtype, run["tokens"], args.store)
        runs.append(run)
        print(json.dumps({"dtype": dtype, "ratio": run["bulkinfer_over_sentence_transformers"],
                          **{name: timing["warm_tok_s"] for name, timing in run["systems"].items()}}))
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(load_at_start),
              "torch_threads": torch.get_num_threads(),
              "command": shlex.join(["python", "benchmarks/embed_speed.py", *(argv or sys.argv[1:])]),
              "shape": args.shape, "pooling": args.pooling, "texts": args.texts, "seed": args.seed,
              "repeats": args.repeats, "runs": runs}
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
