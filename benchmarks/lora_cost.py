"""What many LoRA adapters cost a step on the CPU, against the base model's step.

random:50m's projections as plain matrices (8 layers of fused q/k/v, o, fused gate/up and down,
then the 32,000-row LM head over the rows that sample), each through the model's own linear
layer. With adapters, every one of the seven projections (q, k, v, o, gate, up, down) adds a
rank-16 shrink and an expand into its columns of the fused output, as a layer with adapters does;
the step builds its ``LoRABatch`` once.
Attention, norms and activations are left out: they cost the same with and without adapters, so
this ratio is an upper bound of the whole step's. The whole step's is then estimated from the real
engine's step on random:50m (same thread, same rows), timed in the same run, plus what the
adapters added here.

Steps: decode of 64 sequences (64 rows, 64 sampled) and a prefill of 2,048 tokens (32 prompts of
64, 32 sampled); sequences are dealt to the adapters in turn, so a decode step's adapters
alternate row by row, unless the batch is ordered by adapter (a third step). One thread, best of N thread CPU time (which hardly moves when the
machine is shared), the configurations taking turns.

    python benchmarks/lora_cost.py [--repeats 7] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from bulkinfer.bench.random_model import SHAPES
from bulkinfer.kernels.lora import lora_expand, lora_shrink, token_groups
from bulkinfer.layers.linear import linear

RANK = 16
ADAPTER_COUNTS = (1, 8, 32)
# (rows, sequences, ordered by adapter): each sequence's rows are consecutive, and it samples one row.
STEPS = {"decode, 64 sequences": (64, 64, False), "decode, 64 sequences ordered by adapter": (64, 64, True),
         "prefill, 32 prompts of 64 tokens": (2048, 32, False)}


def projections() -> dict[str, list[tuple[str, int, int]]]:
    """Each fused projection of a layer: its parts as (name, input width, output width)."""
    shape = SHAPES["50m"]
    hidden, inter = shape.hidden_size, shape.intermediate_size
    head_dim = hidden // shape.num_attention_heads
    kv = shape.num_key_value_heads * head_dim
    return {"qkv": [("q", hidden, hidden), ("k", hidden, kv), ("v", hidden, kv)], "o": [("o", hidden, hidden)],
            "gate_up": [("gate", hidden, inter), ("up", hidden, inter)], "down": [("down", inter, hidden)]}


def make_layers(num_adapters: int) -> list[dict]:
    """Random weights per layer; with adapters, slot-stacked A [S, R, in] and B [S, out, R] per part."""
    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(SHAPES["50m"].num_hidden_layers):
        layer = {}
        for name, parts in projections().items():
            width_in, width_out = parts[0][1], sum(out for _, _, out in parts)
            layer[name] = {"weight": torch.randn(width_out, width_in, generator=gen) / width_in ** 0.5,
                           "parts": [(torch.randn(num_adapters, RANK, width_in, generator=gen) / width_in ** 0.5,
                                      torch.randn(num_adapters, out, RANK, generator=gen) / RANK ** 0.5, out)
                                     for _, _, out in parts] if num_adapters else []}
        layers.append(layer)
    return layers


def run_step(layers: list[dict], lm_head: torch.Tensor, inputs: dict[str, torch.Tensor], sampled: int,
             slots: torch.Tensor | None, scaling: torch.Tensor) -> None:
    """Every projection of every layer, then the LM head; with ``slots``, each part's adapters too.
    Each projection reads a ready input of its width (the layer's hidden state or MLP activations)."""
    batch = token_groups(slots) if slots is not None else None
    for layer in layers:
        for projection in layer.values():
            h = inputs[projection["weight"].shape[1]]
            out = linear(h, projection["weight"])
            start = 0
            for lora_a, lora_b, width in projection["parts"]:
                lora_expand(lora_shrink(h, lora_a, batch), lora_b, batch, out[:, start:start + width], scaling)
                start += width
    linear(inputs[lm_head.shape[1]][-sampled:], lm_head)


def deal(rows: int, sequences: int, num_adapters: int, ordered: bool) -> torch.Tensor:
    """Each row's adapter: sequences take the adapters in turn; ordered, the rows sorted by adapter."""
    slots = (torch.arange(rows) // (rows // sequences)).remainder(num_adapters)
    return slots.sort(stable=True).values if ordered else slots


def best_ms(step, repeats: int) -> float:
    step()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        step()
        times.append(time.thread_time() - start)
    return min(times) * 1e3


def engine_steps_ms(repeats: int) -> dict[str, float]:
    """The real engine's step on random:50m for the decode and prefill steps above: best of
    ``repeats`` process CPU times (one thread). Decode rows attend over 256-token prompts."""
    import numpy as np

    from bulkinfer import LLM, SamplingParams
    from bulkinfer.bench.run import model_path

    llm = LLM(str(model_path("random:50m", "auto")), max_num_batched_tokens=2048, max_model_len=512)
    rng = np.random.default_rng(0)

    def add(sequences: int, prompt_tokens: int, max_tokens: int) -> None:
        for _ in range(sequences):
            prompt = rng.integers(4, SHAPES["50m"].vocab_size, prompt_tokens).tolist()  # fresh: no prefix hits
            llm.add_request(f"r{rng.integers(1 << 62)}", prompt, SamplingParams(max_tokens=max_tokens,
                                                                               ignore_eos=True))

    def timed_step() -> float:
        start = time.process_time()
        llm.step()
        return (time.process_time() - start) * 1e3

    def drain() -> None:
        while llm.has_unfinished_requests():
            llm.step()

    prefill = []
    for _ in range(repeats):
        add(32, 64, 1)
        prefill.append(timed_step())  # 2,048 prompt tokens: one step
        drain()
    prompted = llm.stats.prompt_tokens
    add(64, 256, 64)
    while llm.stats.prompt_tokens < prompted + 64 * 256:
        llm.step()
    llm.step()  # the last prompt's first decode
    decode = [timed_step() for _ in range(repeats)]
    drain()
    return {"decode": min(decode), "prefill": min(prefill)}


def measure(repeats: int) -> dict:
    torch.set_num_threads(1)
    lm_head = torch.randn(SHAPES["50m"].vocab_size, SHAPES["50m"].hidden_size) / 20
    configs = {"base": (make_layers(0), 0)} | {f"{n} adapters": (make_layers(n), n) for n in ADAPTER_COUNTS}
    shape = SHAPES["50m"]
    engine = engine_steps_ms(repeats)
    results = {}
    for step, (rows, sequences, ordered) in STEPS.items():
        inputs = {width: torch.randn(rows, width) for width in (shape.hidden_size, shape.intermediate_size)}
        times: dict[str, float] = {}
        for _ in range(3):  # rounds, the configurations taking turns: each keeps its best
            for label, (layers, n) in configs.items():
                slots = deal(rows, sequences, n, ordered) if n else None
                scaling = torch.full((n,), 2.0 / RANK)
                ms = best_ms(lambda: run_step(layers, lm_head, inputs, sequences, slots, scaling), repeats)
                times[label] = min(times.get(label, ms), ms)
        engine_ms = engine[step.split(",")[0]]
        results[step] = {label: {"ms": round(ms, 2), "vs_base": round(ms / times["base"], 3),
                                 "whole_step_ms": round(engine_ms + ms - times["base"], 2),
                                 "whole_step_vs_base": round((engine_ms + ms - times["base"]) / engine_ms, 3)}
                         for label, ms in times.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", help="also write the report to this JSON file")
    args = parser.parse_args()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, 1 thread",
              "model": "random:50m projections + LM head, float32", "rank": RANK, "steps": measure(args.repeats)}
    print(json.dumps(report, indent=1))
    if args.output:
        with open(args.output, "w") as file:
            json.dump(report, file, indent=1)
            file.write("\n")


if __name__ == "__main__":
    main()
