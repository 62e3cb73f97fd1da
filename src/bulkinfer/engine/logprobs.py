"""Top-k log-probability records for generated and prompt tokens (vLLM's shape: id -> Logprob)."""

from __future__ import annotations

import torch

from bulkinfer.outputs import Logprob, PositionLogprobs


def position_logprobs(logprobs: torch.Tensor, chosen: torch.Tensor, k: int, tokenizer=None) -> list[PositionLogprobs]:
    """logprobs: [n, vocab] fp32; chosen: [n] the tokens taken. The chosen token is always listed;
    without a tokenizer, decoded_token stays None."""
    decode = (lambda token: tokenizer.decode([token])) if tokenizer is not None else (lambda token: None)
    chosen_values = logprobs.gather(1, chosen[:, None])  # [n, 1]
    ranks = (logprobs > chosen_values).sum(-1) + 1
    top_values, top_ids = logprobs.topk(k, dim=-1) if k > 0 else (chosen_values[:, :0], chosen[:, None][:, :0])
    records = []
    for row, token in enumerate(chosen.tolist()):
        record = {token: Logprob(chosen_values[row, 0].item(), int(ranks[row]), decode(token))}
        for rank, (value, top_id) in enumerate(zip(top_values[row].tolist(), top_ids[row].tolist()), 1):
            record.setdefault(top_id, Logprob(value, rank, decode(top_id)))
        records.append(record)
    return records
