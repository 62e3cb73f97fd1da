"""The benchmark workloads: each a list of (prompt token ids, max_tokens, n)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bulkinfer.bench import WORKLOADS


@dataclass(frozen=True)
class BenchRequest:
    prompt: list[int]
    max_tokens: int
    n: int = 1




# --structured json: a label out of three, then free text, so outputs still run to their max_tokens
# (a random model closes the string only by chance) while each begins with forced tokens.
BENCH_SCHEMA = {"type": "object", "properties": {"label": {"enum": ["bug", "feature", "question"]},
                                                 "text": {"type": "string"}},
                "required": ["label", "text"], "additionalProperties": False}


def make_workload(name: str, num_requests: int, vocab_size: int, seed: int = 0) -> list[BenchRequest]:
    rng = np.random.default_rng(seed)
    tokens = lambda count: rng.integers(4, vocab_size, count).tolist()  # noqa: E731 - ids past the specials
    if name == "mixed":
        # Prompts log-normal between 16 and 1024 tokens, outputs uniform 16..256.
        lengths = np.clip(rng.lognormal(np.log(200), 0.9, num_requests), 16, 1024).astype(int)
        return [BenchRequest(tokens(n), int(rng.integers(16, 257))) for n in lengths]
    if name == "prefix":
        # An eval: one 1,000-token few-shot prefix, a short question each, a short answer.
        prefix = tokens(1000)
        return [BenchRequest(prefix + tokens(int(rng.integers(8, 33))), int(rng.integers(1, 9)))
                for _ in range(num_requests)]
    if name == "synthetic":
        # Synthetic data: short prompts, long sampled outputs, several samples each.
        return [BenchRequest(tokens(int(rng.integers(16, 65))), int(rng.integers(128, 257)), n=4)
                for _ in range(num_requests)]
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")


def useful_tokens(requests: list[BenchRequest]) -> int:
    """Output tokens the requests asked for: padding and over-generation do not count."""
    return sum(r.max_tokens * r.n for r in requests)


def prompt_tokens(requests: list[BenchRequest]) -> int:
    return sum(len(r.prompt) * r.n for r in requests)
