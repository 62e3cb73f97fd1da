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

Then the real engine end to end: ``LLM(random:50m, enable_lora=True, max_loras=N, max_lora_rank=16)``
generating for the same prompts with no adapter (the base model, an engine without LoRA) and with 1, 8
and 32 rank-16 adapters on all seven projections, written as PEFT directories and dealt to the prompts
in turn; ``max_loras`` is N, so every adapter has a slot and none waits for another. A decode-heavy run
(64 prompts of 32 tokens, 64 new tokens each) and a prefill-heavy one (32 prompts of 512 tokens, one
new token each); prefix caching off, so every round computes the same work.

Steps: decode of 64 sequences (64 rows, 64 sampled) and a prefill of 2,048 tokens (32 prompts of
64, 32 sampled); sequences are dealt to the adapters in turn, so a decode step's adapters
alternate row by row, unless the batch is ordered by adapter (a third step). One thread, best of N thread CPU time (which hardly moves when the
machine is shared), the configurations taking turns.

    python benchmarks/lora_cost.py [--repeats 7] [--output FILE]
    python benchmarks/lora_cost.py --engine [--repeats 3] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch
from bulkinfer.kernels.lora import lora_expand, lora_shrink, token_groups

from bulkinfer.bench.random_model import SHAPES
from bulkinfer.bench.run import save_report
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


# name -> (prompts, prompt tokens, new tokens each)
RUNS = {"decode-heavy": (64, 32, 64), "prefill-heavy": (32, 512, 1)}


def write_adapter(path: Path, seed: int) -> Path:
    """A rank-RANK PEFT adapter for random:50m on all seven projections, in PEFT's own layout
    (adapter_config.json + adapter_model.safetensors with base_model.model.* keys); A and B both random."""
    from safetensors.torch import save_file

    shape, gen = SHAPES["50m"], torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(shape.num_hidden_layers):
        for block, parts in (("self_attn", projections()["qkv"] + projections()["o"]),
                             ("mlp", projections()["gate_up"] + projections()["down"])):
            for name, width_in, width_out in parts:
                key = f"base_model.model.model.layers.{layer}.{block}.{name}_proj"
                tensors[f"{key}.lora_A.weight"] = torch.randn(RANK, width_in, generator=gen) / width_in ** 0.5
                tensors[f"{key}.lora_B.weight"] = torch.randn(width_out, RANK, generator=gen) / RANK ** 0.5
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    targets = [f"{name}_proj" for parts in projections().values() for name, _, _ in parts]
    (path / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": RANK, "lora_alpha": 2 * RANK, "target_modules": targets, "bias": "none"}))
    return path


def engine_run(llm, prompts: list[list[int]], new_tokens: int, adapters: list) -> tuple[float, int]:
    """One ``generate`` over ``prompts``, adapters dealt in turn (none: the base model): process CPU
    seconds and the tokens computed (prompt + generated)."""
    from bulkinfer import SamplingParams

    lora = [adapters[i % len(adapters)] for i in range(len(prompts))] if adapters else None
    params = SamplingParams(max_tokens=new_tokens, ignore_eos=True)
    start = time.process_time()
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False, lora_request=lora)
    seconds = time.process_time() - start
    return seconds, sum(len(o.prompt_token_ids) + len(o.outputs[0].token_ids) for o in outputs)


def measure_engine(rounds: int, adapter_dir: Path) -> dict:
    """tok/s of each run with 0, 1, 8 and 32 adapters: best of ``rounds``, the configurations taking turns."""
    import numpy as np

    from bulkinfer import LLM
    from bulkinfer.bench.run import model_path
    from bulkinfer.engine.lora.request import LoRARequest

    torch.set_num_threads(1)
    model = str(model_path("random:50m", "auto"))
    common = {"max_model_len": 1024, "max_num_batched_tokens": 2048, "enable_prefix_caching": False,
              "kv_cache_memory_gb": 0.5}
    paths = [write_adapter(adapter_dir / f"a{i}", seed=i) for i in range(max(ADAPTER_COUNTS))]
    engines = {0: LLM(model, **common)} | {n: LLM(model, enable_lora=True, max_loras=n, max_lora_rank=RANK, **common)
                                           for n in ADAPTER_COUNTS}
    rng = np.random.default_rng(0)
    results = {}
    for run, (count, length, new_tokens) in RUNS.items():
        prompts = [rng.integers(4, SHAPES["50m"].vocab_size, length).tolist() for _ in range(count)]
        best: dict[int, tuple[float, int]] = {}
        for round_ in range(rounds + 1):  # round 0 warms up every engine and loads the adapters
            for n, llm in engines.items():
                adapters = [LoRARequest(f"a{i}", i + 1, str(paths[i])) for i in range(n)]
                seconds, tokens = engine_run(llm, prompts, new_tokens, adapters)
                if round_:
                    best[n] = min(best.get(n, (seconds, tokens)), (seconds, tokens))
        base = best[0][0]
        results[run] = {("base" if n == 0 else f"{n} adapters"): {
            "tok_s": round(tokens / seconds, 1), "seconds": round(seconds, 3), "vs_base": round(seconds / base, 3)}
            for n, (seconds, tokens) in best.items()}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", help="also write the report to this JSON file")
    parser.add_argument("--engine", action="store_true",
                        help="measure the real engine end to end (best of --repeats rounds) instead of the projections")
    args = parser.parse_args()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, 1 thread", "rank": RANK}
    if args.engine:
        with tempfile.TemporaryDirectory() as adapter_dir:
            report |= {"model": "random:50m, float32, LLM.generate; seconds are process CPU time",
                       "runs": {name: {"prompts": c, "prompt_tokens": p, "new_tokens": t}
                                for name, (c, p, t) in RUNS.items()},
                       "engine": measure_engine(args.repeats, Path(adapter_dir))}
    else:
        report |= {"model": "random:50m projections + LM head, float32", "steps": measure(args.repeats)}
    print(json.dumps(report, indent=1))
    if args.output:
        save_report(report, Path(args.output))


if __name__ == "__main__":
    main()
