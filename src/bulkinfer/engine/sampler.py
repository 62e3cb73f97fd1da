"""Batched sampling: logit rules (logit_bias, min_tokens, bad_words), penalties, temperature, top-k/top-p/min-p, then one draw per row.

A draw inverts each row's cumulative distribution at one uniform number. The number comes from
the request's own generator when it is seeded, so its draws do not depend on what else is in the
batch; the logits it draws from can, in their last bits (matmul tiling and attention splits follow
the batch's shape), unless the engine runs with deterministic=True. The rest of the work (one
cumulative sum, one search) is batched. One number per row
rather than one per vocabulary entry (as Gumbel-style noise needs) matters on a CPU: drawing
32,000 exponentials took about a fifth of a 50M-parameter model's decode time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.engine.logit_rules import apply_logit_rules
from bulkinfer.engine.sequence import Sequence


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: torch.Tensor | None  # [batch, vocab] raw log-probabilities, when any row asked for them


class Sampler:
    def __init__(self, seed: int, device: torch.device, eos_token_ids: set[int]):
        self.eos_token_ids = eos_token_ids  # what min_tokens holds back, with each request's stop_token_ids
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SamplerOutput:
        # logits: [batch, vocab] fp32, one row per sequence.
        params = [seq.params for seq in seqs]
        raw_logprobs = logits.log_softmax(-1) if any(p.logprobs is not None for p in params) else None
        logits = apply_penalties(apply_logit_rules(logits, seqs, self.eos_token_ids), seqs)
        greedy = [p.greedy for p in params]
        if all(greedy):
            return SamplerOutput(logits.argmax(-1).tolist(), raw_logprobs)
        probs = _filtered_probs(logits, seqs)
        tokens = _invert_cdf(probs, self._uniforms(seqs, probs.device))
        if any(greedy):
            tokens = torch.where(torch.tensor(greedy, device=logits.device), logits.argmax(-1), tokens)
        return SamplerOutput(tokens.tolist(), raw_logprobs)

    def _uniforms(self, seqs: list[Sequence], device: torch.device) -> torch.Tensor:
        """One number in [0, 1) per row: from its own generator if seeded, else from the engine's."""
        uniforms = torch.empty(len(seqs), dtype=torch.float64, device=device)
        unseeded = [row for row, seq in enumerate(seqs) if seq.generator is None]
        if unseeded:
            uniforms[unseeded] = torch.rand(len(unseeded), dtype=torch.float64, device=device,
                                            generator=self.generator)
        for row, seq in enumerate(seqs):
            if seq.generator is not None:
                uniforms[row] = torch.rand(1, dtype=torch.float64, device=device, generator=seq.generator)[0]
        return uniforms


def _invert_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """[batch, vocab] probabilities (rows need not sum to 1), [batch] uniforms -> [batch] tokens."""
    cdf = probs.double().cumsum(-1)  # float64: the tail of a 100k-token vocabulary stays resolved
    targets = uniforms[:, None] * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)
    # The first token whose cumulative mass passes the target has mass of its own, unless rounding
    # put the target on the total; then the likeliest token stands in (odds about 1e-16).
    empty = probs.gather(1, tokens[:, None]).squeeze(1) == 0
    return torch.where(empty, probs.argmax(-1), tokens) if empty.any() else tokens


def apply_penalties(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    rows = [i for i, s in enumerate(seqs) if s.params.repetition_penalty != 1
            or s.params.presence_penalty != 0 or s.params.frequency_penalty != 0]
    if not rows:
        return logits
    # Only the rows that asked, all at once: their tokens cross to the device in one copy per kind,
    # and counts and seen-masks are built by one scatter each (no per-row tensors or syncs).
    logits = logits.clone()
    vocab, device = logits.shape[1], logits.device
    params = [seqs[row].params for row in rows]
    index = torch.tensor(rows, device=device)
    values = logits[index]
    counts = _token_counts([seqs[row].output_token_ids for row in rows], vocab, device).to(logits.dtype)
    repetition = torch.tensor([p.repetition_penalty for p in params], device=device)[:, None]
    if any(p.repetition_penalty != 1 for p in params):
        seen = _token_counts([seqs[row].token_ids for row in rows], vocab, device) > 0
        penalized = torch.where(values > 0, values / repetition, values * repetition)
        values = torch.where(seen & (repetition != 1), penalized, values)
    frequency = torch.tensor([p.frequency_penalty for p in params], device=device)[:, None]
    presence = torch.tensor([p.presence_penalty for p in params], device=device)[:, None]
    logits[index] = values - (frequency * counts + presence * (counts > 0))
    return logits


def _token_counts(token_lists: list[list[int]], vocab: int, device: torch.device) -> torch.Tensor:
    """[len(token_lists), vocab] int64: how often each row's list holds each token id below vocab."""
    rows = [row for row, tokens in enumerate(token_lists) for token in tokens if token < vocab]
    ids = [token for tokens in token_lists for token in tokens if token < vocab]
    counts = torch.zeros(len(token_lists), vocab, dtype=torch.long, device=device)
    flat = torch.tensor(rows, dtype=torch.long) * vocab + torch.tensor(ids, dtype=torch.long)
    counts.view(-1).index_add_(0, flat.to(device), torch.ones_like(flat, device=device))
    return counts


def _filtered_probs(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """Softmax at each row's temperature, zero outside its top-k / top-p / min-p support."""
    device = logits.device
    temperature = torch.tensor([1.0 if s.params.greedy else s.params.temperature for s in seqs], device=device)
    probs = (logits / temperature[:, None]).softmax(-1)
    top_k = [s.params.top_k for s in seqs]
    top_p = [s.params.top_p for s in seqs]
    min_p = [s.params.min_p for s in seqs]
    if all(k == -1 for k in top_k) and all(p == 1 for p in top_p) and all(m == 0 for m in min_p):
        return probs
    sorted_probs, order = probs.sort(-1, descending=True)
    vocab = probs.shape[1]
    rank = torch.arange(vocab, device=device)[None, :]
    k = torch.tensor([vocab if k == -1 else min(k, vocab) for k in top_k], device=device)  # any int: 2**80 too
    cut = rank >= k[:, None]
    before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the tokens ranked above
    cut |= before >= torch.tensor(top_p, device=device)[:, None]
    cut |= sorted_probs < torch.tensor(min_p, device=device)[:, None] * sorted_probs[:, :1]
    cut[:, 0] = False  # the most likely token always stays
    sorted_probs = sorted_probs.masked_fill(cut, 0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
