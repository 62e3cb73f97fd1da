"""A pooling request's reading of its hidden states, chunk by chunk, as chunked prefill computes them.

Last-token and cls pooling take one row from the chunk that holds it; mean pooling keeps a running sum across
chunks. Once the last chunk is in, the request's head (an embedding's identity, a classifier's ``score``, a
reranker's two LM-head rows) turns the pooled state into what the request returns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bulkinfer.engine.scheduler import ScheduledBatch

Head = Callable[[torch.Tensor], torch.Tensor]  # pooled [hidden] -> the request's raw result [n]


class Pooler:
    def __init__(self, method: str, head: Head):
        self.method = method  # last, mean or cls
        self.head = head
        self.result: torch.Tensor | None = None  # fp32 on the CPU, once the prompt is all read
        self._sum: torch.Tensor | None = None
        self._first: torch.Tensor | None = None

    @property
    def reads_every_token(self) -> bool:
        """Whether every token's hidden state must be computed: a prefix-cache hit would skip some, which only
        last-token pooling can afford."""
        return self.method != "last"

    def read(self, hidden: torch.Tensor, begin: int, num_tokens: int) -> None:
        """Take the chunk of positions [begin, begin + len(hidden)) of a prompt of num_tokens."""
        # hidden: [chunk, hidden_size]
        if self.method == "mean":
            chunk_sum = hidden.float().sum(0)
            self._sum = chunk_sum if self._sum is None else self._sum + chunk_sum
        if self.method == "cls" and begin == 0:
            # A copy: the step's hidden states may be a CUDA graph's buffer, which the next step overwrites.
            self._first = hidden[0].clone()
        if begin + hidden.shape[0] < num_tokens:
            return
        pooled = {"last": lambda: hidden[-1], "mean": lambda: self._sum / num_tokens,
                  "cls": lambda: self._first}[self.method]()
        self.result = self.head(pooled.to(hidden.dtype)).float().cpu()

    def reset(self) -> None:
        """A preempted sequence computes its prompt again from the start."""
        self.result = self._sum = self._first = None


def chunk_reader(batch: ScheduledBatch) -> Callable[[torch.Tensor], None] | None:
    """What reads the step's hidden states [num_tokens, hidden] into the batch's poolers (None: no pooling
    sequence runs). Called before the sequences advance: their computed counts are still the chunks' starts."""
    chunks, row = [], 0
    for seq, num_new in zip(batch.seqs, batch.num_new_tokens):
        if seq.pooler is not None:
            chunks.append((seq, row, seq.num_computed_tokens, num_new))
        row += num_new
    if not chunks:
        return None

    def read(hidden: torch.Tensor) -> None:
        for seq, first_row, begin, num_new in chunks:
            seq.pooler.read(hidden[first_row:first_row + num_new], begin, len(seq))

    return read
