"""Tied logprobs: the k best go lowest id first, whatever the other rows of the step (bfloat16 logits tie often,
and deterministic mode promises the same records alone as in any batch)."""

from __future__ import annotations

import torch

from bulkinfer.engine.logprobs import top_logprobs


def test_tied_values_go_lowest_id_first_alone_and_in_a_batch():
    row = torch.zeros(1, 704)
    row[0, ::3] = -1.0  # ids 1, 2, 4, 5, 7, ... tie at 0
    chosen = torch.tensor([1])
    alone = top_logprobs(row, chosen, 4)
    batch = torch.cat([torch.randn(7, 704, generator=torch.Generator().manual_seed(0)), row])
    mixed = top_logprobs(batch, torch.cat([torch.zeros(7, dtype=torch.long), chosen]), 4)
    assert alone.top_ids == [[1, 2, 4, 5]] and mixed.top_ids[-1] == [1, 2, 4, 5]
    assert alone.top_values == [[0.0] * 4] and alone.ranks == [1]


def test_distinct_values_keep_their_order():
    logprobs = torch.randn(5, 1000, generator=torch.Generator().manual_seed(1)).log_softmax(-1)
    top = top_logprobs(logprobs, torch.arange(5), 7)
    values, ids = logprobs.topk(7)
    assert top.top_ids == ids.tolist()
    assert top.top_values == values.tolist()
