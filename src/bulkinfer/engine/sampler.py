"""Batched sampling: penalties, temperature, top-k/top-p/min-p, then one draw per row.

A draw is ``argmax(probs / noise)`` with exponential noise (the Gumbel-max trick in another form),
so each row needs only its own noise: a seeded request draws its noise from its own generator,
and its tokens do not depend on what else is in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.engine.sequence import Sequence


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: torch.Tensor | None  # [batch, vocab] raw log-probabilities, when any row asked for them


class Sampler:
    def __init__(self, seed: int, device: torch.device):
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SamplerOutput:
        # logits: [batch, vocab] fp32, one row per sequence.
        params = [seq.params for seq in seqs]
        raw_logprobs = logits.log_softmax(-1) if any(p.logprobs is not None for p in params) else None
        logits = apply_penalties(logits, seqs)
        greedy = logits.argmax(-1)
        if all(p.greedy for p in params):
            return SamplerOutput(greedy.tolist(), raw_logprobs)
        probs = _filtered_probs(logits, seqs)
        sampled = (probs / self._noise(probs, seqs)).argmax(-1)
        is_greedy = torch.tensor([p.greedy for p in params], device=logits.device)
        return SamplerOutput(torch.where(is_greedy, greedy, sampled).tolist(), raw_logprobs)

    def _noise(self, probs: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        # Each row's noise is drawn once: from its own generator if seeded, else from the engine's.
        noise = torch.empty_like(probs)
        unseeded = [row for row, seq in enumerate(seqs) if seq.generator is None]
        if unseeded:
            noise[unseeded] = torch.empty_like(probs[unseeded]).exponential_(generator=self.generator)
        for row, seq in enumerate(seqs):
            if seq.generator is not None:
                noise[row].exponential_(generator=seq.generator)
        return noise


def apply_penalties(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    rows = [i for i, s in enumerate(seqs) if s.params.repetition_penalty != 1
            or s.params.presence_penalty != 0 or s.params.frequency_penalty != 0]
    if not rows:
        return logits
    logits = logits.clone()
    vocab = logits.shape[1]
    for row in rows:  # only rows that asked; each costs O(its tokens + vocab)
        params, seq = seqs[row].params, seqs[row]
        output = torch.tensor(seq.output_token_ids, dtype=torch.long, device=logits.device)
        counts = torch.bincount(output[output < vocab], minlength=vocab).to(logits.dtype)
        if params.repetition_penalty != 1:
            seen = torch.tensor(seq.token_ids, dtype=torch.long, device=logits.device)
            seen = seen[seen < vocab].unique()
            values = logits[row, seen]
            logits[row, seen] = torch.where(values > 0, values / params.repetition_penalty,
                                            values * params.repetition_penalty)
        logits[row] -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
    return logits


def _filtered_probs(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """Softmax at each row's temperature, zero outside its top-k / top-p / min-p support."""
    device = logits.device
    temperature = torch.tensor([s.params.temperature or 1.0 for s in seqs], device=device)
    probs = (logits / temperature[:, None]).softmax(-1)
    top_k = [s.params.top_k for s in seqs]
    top_p = [s.params.top_p for s in seqs]
    min_p = [s.params.min_p for s in seqs]
    if all(k == -1 for k in top_k) and all(p == 1 for p in top_p) and all(m == 0 for m in min_p):
        return probs
    sorted_probs, order = probs.sort(-1, descending=True)
    vocab = probs.shape[1]
    rank = torch.arange(vocab, device=device)[None, :]
    k = torch.tensor([vocab if k == -1 else k for k in top_k], device=device)
    cut = rank >= k[:, None]
    before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the tokens ranked above
    cut |= before >= torch.tensor(top_p, device=device)[:, None]
    cut |= sorted_probs < torch.tensor(min_p, device=device)[:, None] * sorted_probs[:, :1]
    cut[:, 0] = False  # the most likely token always stays
    sorted_probs = sorted_probs.masked_fill(cut, 0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
