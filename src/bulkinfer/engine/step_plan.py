"""One step's model inputs, first as plain arrays, then as tensors on a device.

Rank 0 builds the plan from the scheduled batch; under tensor parallelism it sends the same plan
to the other ranks (arrays pickle cheaply over a pipe), and every rank makes its own tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bulkinfer.engine.scheduler import ScheduledBatch
from bulkinfer.engine.sequence import Sequence
from bulkinfer.layers.attention_metadata import AttentionMetadata


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    attn: AttentionMetadata
    logit_rows: torch.Tensor  # rows of the hidden states that need logits


@dataclass
class StepPlan:
    input_ids: np.ndarray  # [num_tokens] int64
    positions: np.ndarray  # [num_tokens] int64
    slot_mapping: np.ndarray  # [num_tokens] int64
    query_start_loc: np.ndarray  # [num_seqs + 1] int32
    seq_lens: np.ndarray  # [num_seqs] int32
    block_tables: np.ndarray  # [num_seqs, max_blocks] int32
    logit_rows: np.ndarray  # [num_logits] int64: sampled rows first, then prompt-scoring rows

    def to(self, device: torch.device) -> StepInputs:
        tensor = lambda array: torch.from_numpy(array).to(device)  # noqa: E731
        attn = AttentionMetadata(tensor(self.slot_mapping), tensor(self.query_start_loc), tensor(self.seq_lens),
                                 tensor(self.block_tables), max_query_len=int(np.diff(self.query_start_loc).max()),
                                 max_seq_len=int(self.seq_lens.max()))
        return StepInputs(tensor(self.input_ids), tensor(self.positions), attn, tensor(self.logit_rows))


@dataclass
class LogitRows:
    """Which sequence each row of the step's logits belongs to."""

    sample_seqs: list[Sequence]  # sequences whose every token is now computed: they get a new one
    prompt_slices: list[tuple[Sequence, int, int, int]]  # (seq, first scored position, first row, end row)


def plan_step(batch: ScheduledBatch, block_size: int) -> tuple[StepPlan, LogitRows]:
    chunks = [(seq.num_computed_tokens, seq.num_computed_tokens + n) for seq, n in zip(batch.seqs, batch.num_new_tokens)]
    starts = np.cumsum([0] + batch.num_new_tokens)
    tables = np.zeros((len(batch.seqs), max(len(s.block_table) for s in batch.seqs)), dtype=np.int32)
    input_ids, positions, slots = [], [], []
    for i, (seq, (begin, end)) in enumerate(zip(batch.seqs, chunks)):
        pos = np.arange(begin, end)
        tables[i, :len(seq.block_table)] = seq.block_table
        input_ids.extend(seq.token_ids[begin:end])
        positions.append(pos)
        slots.append(tables[i, pos // block_size].astype(np.int64) * block_size + pos % block_size)
    sampled = [i for i, (seq, (_, end)) in enumerate(zip(batch.seqs, chunks))
               if end == len(seq) and not seq.prefill_only]
    sample_rows = [int(starts[i + 1]) - 1 for i in sampled]
    prompt_rows, prompt_slices = _prompt_logprob_rows(batch.seqs, chunks, starts)
    plan = StepPlan(
        input_ids=np.array(input_ids, dtype=np.int64),
        positions=np.concatenate(positions),
        slot_mapping=np.concatenate(slots),
        query_start_loc=starts.astype(np.int32),
        seq_lens=np.array([end for _, end in chunks], dtype=np.int32),
        block_tables=tables,
        logit_rows=np.array(sample_rows + prompt_rows, dtype=np.int64),
    )
    return plan, LogitRows([batch.seqs[i] for i in sampled], prompt_slices)


def _prompt_logprob_rows(seqs: list[Sequence], chunks: list[tuple[int, int]], starts: np.ndarray):
    """Rows whose logits score the next prompt token, for sequences that want those scores."""
    rows, slices = [], []
    for i, (seq, (begin, end)) in enumerate(zip(seqs, chunks)):
        if seq.score_from is None:
            continue
        # Row p predicts scored token p + 1 (a generating sequence samples from its last row).
        first, last = max(begin, seq.score_from - 1), min(end, len(seq.scored_ids) - 1)
        if first >= last:
            continue
        slices.append((seq, first + 1, len(rows), len(rows) + last - first))
        offset = int(starts[i]) - begin
        rows.extend(range(offset + first, offset + last))
    return rows, slices
