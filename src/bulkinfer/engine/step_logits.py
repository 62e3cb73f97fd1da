"""A step's logits, computed and consumed in slices of at most LOGIT_SLICE_ROWS rows.

A scoring or prompt-logprobs step of 8,192 tokens at a 152k vocabulary would hold fp32 logits,
their log_softmax and a comparison mask of [8192, vocab] at once: about 10 GiB that the KV pool's
sizing would have to leave free. Sliced, sampled rows are kept (at most max_num_seqs of them) and
prompt rows are reduced slice by slice to their top-k records, so a step's logits never take
more than LOGIT_SLICE_ROWS rows of vocabulary at a time.
"""

from __future__ import annotations

import torch

from bulkinfer.engine.logprobs import TopLogprobs, top_logprobs
from bulkinfer.engine.sequence import Sequence
from bulkinfer.engine.step_plan import LogitRows

LOGIT_SLICE_ROWS = 1024


def logit_slices(num_rows: int) -> list[slice]:
    return [slice(start, min(start + LOGIT_SLICE_ROWS, num_rows)) for start in range(0, num_rows, LOGIT_SLICE_ROWS)]


class StepLogits:
    """Takes each slice of a step's logits (sampled rows first, then prompt rows) as it is made."""

    def __init__(self, rows: LogitRows, device: torch.device):
        self.num_sampled = len(rows.sample_seqs)
        self.prompt_slices = rows.prompt_slices
        targets = [token for seq, first, start, end in rows.prompt_slices
                   for token in seq.scored_ids[first:first + end - start]]
        self.targets = torch.tensor(targets, dtype=torch.long).to(device, non_blocking=True)
        self.k = max((seq.params.prompt_logprobs for seq, *_ in rows.prompt_slices), default=0)
        self.sampled: list[torch.Tensor] = []
        self.prompt: list[TopLogprobs] = []

    def consume(self, start: int, logits: torch.Tensor) -> None:
        """``logits`` are rows ``start ..`` of the step's logit rows."""
        take = max(0, min(self.num_sampled - start, logits.shape[0]))
        if take:
            self.sampled.append(logits[:take])
        if take < logits.shape[0]:
            first = start + take - self.num_sampled
            rest = logits[take:]
            self.prompt.append(top_logprobs(rest.log_softmax(-1), self.targets[first:first + rest.shape[0]], self.k))

    def sampled_logits(self) -> torch.Tensor:
        """[num_sampled, vocab] fp32 (an empty tensor when the step samples nothing)."""
        if not self.sampled:
            return torch.empty(0, 0)
        return torch.cat(self.sampled) if len(self.sampled) > 1 else self.sampled[0]

    def prompt_scores(self) -> list[tuple[Sequence, int, TopLogprobs]]:
        """(seq, first scored position, its positions' top logprobs) for each scored sequence."""
        scores = TopLogprobs.concat(self.prompt)
        return [(seq, first, scores[start:end]) for seq, first, start, end in self.prompt_slices]
