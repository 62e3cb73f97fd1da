"""What the attention layers need to know about one step's batch, built by the model runner."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] int64: cache slot of each new token, -1 = do not store
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32: offsets of each sequence's new tokens
    seq_lens: torch.Tensor  # [num_seqs] int32: cached tokens per sequence once this step's are stored
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32, padded with 0
    max_query_len: int
    max_seq_len: int
    min_query_len: int = 1  # above 1: no decode row this step, so no decode kernel launch
