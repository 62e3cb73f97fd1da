"""What the attention and recurrent layers need to know about one step's batch, built by the model runner."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RecurrentBatch:
    """For layers with recurrent state: which of the step's sequences advance by one token from their state
    (decode, one batched update) and which prefill a chunk (from zeros, or from their state for a later chunk)."""

    decode_rows: torch.Tensor  # [num_decode] int64: the token row of each decoding sequence
    decode_slots: torch.Tensor  # [num_decode] int64: its state slot
    prefill_rows: torch.Tensor  # [num_prefill_tokens] int64: the token rows of prefilling sequences, in order
    prefill_slots: torch.Tensor  # [num_prefill] int64
    prefill_query_start_loc: torch.Tensor  # [num_prefill + 1] int32: offsets into prefill_rows
    prefill_has_initial_state: torch.Tensor  # [num_prefill] bool: a later chunk, continuing its state


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [num_tokens] int64: cache slot of each new token, -1 = do not store
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32: offsets of each sequence's new tokens
    seq_lens: torch.Tensor  # [num_seqs] int32: cached tokens per sequence once this step's are stored
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32, padded with 0
    max_query_len: int
    max_seq_len: int
    min_query_len: int = 1  # above 1: no decode row this step, so no decode kernel launch
    recurrent: RecurrentBatch | None = None  # a hybrid model's step; None for attention-only models
