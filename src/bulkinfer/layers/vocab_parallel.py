"""The token embedding and the LM head, each rank holding a contiguous slice of the vocabulary.

Slices are ceil(vocab / K) rows, so the last rank may hold zero rows of padding: no token id
maps to them, and their logits are cut off after the gather.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bulkinfer.layers.linear import Linear
from bulkinfer.layers.parallel import TensorParallel


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, tp: TensorParallel):
        super().__init__()
        self.rows = tp.padded_split(vocab_size)
        self.first = tp.rank * self.rows
        self.tp = tp
        self.weight = nn.Parameter(torch.zeros(self.rows, hidden_size))
        self.weight.tp_dim = 0

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [T, hidden]
        if self.tp.size == 1:
            return F.embedding(input_ids, self.weight)
        local = input_ids - self.first
        outside = (local < 0) | (local >= self.rows)
        hidden = F.embedding(local.masked_fill(outside, 0), self.weight)
        return self.tp.all_reduce(hidden.masked_fill_(outside.unsqueeze(-1), 0))


class ParallelLMHead(Linear):
    def __init__(self, hidden_size: int, vocab_size: int, tp: TensorParallel):
        super().__init__(hidden_size, tp.padded_split(vocab_size), bias=False)
        nn.init.zeros_(self.weight)  # padding rows stay zero
        self.weight.tp_dim = 0
        self.vocab_size = vocab_size
        self.tp = tp

    def forward(self, hidden: torch.Tensor) -> torch.Tensor | None:  # [N, hidden] -> [N, vocab] on rank 0
        logits = self.tp.gather_last_dim(super().forward(hidden))
        return None if logits is None else logits[:, :self.vocab_size]
