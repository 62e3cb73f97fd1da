"""Top-k log-probability records for generated and prompt tokens (vLLM's shape: id -> Logprob).

Each step's rows are ranked in one batch on the device (one gather, one comparison count, one
top-k) and come to the host in one copy; records are then built from plain lists, so a step
costs one synchronisation however many rows want logprobs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bulkinfer.outputs import Logprob, PositionLogprobs


@dataclass
class TopLogprobs:
    """For n positions, on the host: the chosen token's logprob and rank, and the k best."""

    chosen: list[float]
    ranks: list[int]
    top_values: list[list[float]]  # [n][k], best first
    top_ids: list[list[int]]

    def __len__(self) -> int:
        return len(self.chosen)

    def __getitem__(self, rows: slice) -> TopLogprobs:
        return TopLogprobs(self.chosen[rows], self.ranks[rows], self.top_values[rows], self.top_ids[rows])

    @staticmethod
    def concat(parts: list[TopLogprobs]) -> TopLogprobs:
        return TopLogprobs(*([x for part in parts for x in getattr(part, name)]
                             for name in ("chosen", "ranks", "top_values", "top_ids")))


def top_logprobs(logprobs: torch.Tensor, chosen: torch.Tensor, k: int) -> TopLogprobs:
    """logprobs: [n, vocab] fp32; chosen: [n] token ids on the same device."""
    chosen_values = logprobs.gather(1, chosen[:, None])  # [n, 1]
    ranks = (logprobs > chosen_values).sum(-1) + 1
    top_ids = best_first(logprobs, k)
    top_values = logprobs.gather(1, top_ids)
    packed = torch.cat([chosen_values, ranks[:, None].to(logprobs.dtype), top_values, top_ids.to(logprobs.dtype)], 1)
    host = packed.double().cpu()  # the one copy (float64 holds token ids exactly)
    values = host[:, 2:2 + k].tolist()
    return TopLogprobs(host[:, 0].tolist(), host[:, 1].long().tolist(), values, host[:, 2 + k:].long().tolist())


_ID_BITS = 20  # room for vocabularies of up to 2**20 tokens below each value's 32 bits


def best_first(logprobs: torch.Tensor, k: int) -> torch.Tensor:
    """[n, k] ids of each row's k highest values, equal values by lowest id: the same ids whatever the other
    rows. (topk's order among equal values depends on the batch's shape, and bfloat16 logits tie often.)"""
    bits = logprobs.float().view(torch.int32).long()
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)  # float32 order as integer order
    ids = torch.arange(logprobs.shape[-1], device=logprobs.device)
    return ((ordered << _ID_BITS) + ((1 << _ID_BITS) - 1 - ids)).topk(k, dim=-1).indices


def records(top: TopLogprobs, chosen: list[int], ks: list[int], tokenizer=None) -> list[PositionLogprobs]:
    """One record per position: the chosen token, then the position's own ``ks[i]`` best (the
    chosen one is listed once). Without a tokenizer, decoded_token stays None."""
    decode = (lambda token: tokenizer.decode([token])) if tokenizer is not None else (lambda token: None)
    out = []
    for row, (token, k) in enumerate(zip(chosen, ks)):
        record = {token: Logprob(top.chosen[row], top.ranks[row], decode(token))}
        for rank, (value, top_id) in enumerate(zip(top.top_values[row][:k], top.top_ids[row][:k]), 1):
            record.setdefault(top_id, Logprob(value, rank, decode(top_id)))
        out.append(record)
    return out


def position_logprobs(logprobs: torch.Tensor, chosen: torch.Tensor, k: int, tokenizer=None) -> list[PositionLogprobs]:
    """logprobs: [n, vocab] fp32; chosen: [n] the tokens taken; k best listed for every position."""
    return records(top_logprobs(logprobs, chosen, k), chosen.tolist(), [k] * len(chosen), tokenizer)
