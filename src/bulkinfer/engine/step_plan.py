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
from bulkinfer.layers.attention_metadata import AttentionMetadata, RecurrentBatch


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    attn: AttentionMetadata
    logit_rows: torch.Tensor  # rows of the hidden states that need logits
    lora_slots: torch.Tensor | None = None  # [num_tokens] int64: each token's adapter slot, -1 = base model


@dataclass
class StepPlan:
    input_ids: np.ndarray  # [num_tokens] int64
    positions: np.ndarray  # [num_tokens] int64
    slot_mapping: np.ndarray  # [num_tokens] int64
    query_start_loc: np.ndarray  # [num_seqs + 1] int32
    seq_lens: np.ndarray  # [num_seqs] int32
    block_tables: np.ndarray  # [num_seqs, max_blocks] int32
    logit_rows: np.ndarray  # [num_logits] int64: sampled rows first, then prompt-scoring rows
    lora_slots: np.ndarray | None = None  # [num_tokens] int64, -1 = base model; None: no adapter this step
    state_slots: np.ndarray | None = None  # [num_seqs] int64: recurrent state slots; None: no recurrent layers

    def to(self, device: torch.device, staging: HostStaging | None = None) -> StepInputs:
        """Tensors on ``device``: through ``staging`` in one copy, else each array on its own
        (on the CPU, no copy at all)."""
        arrays = [self.input_ids, self.positions, self.slot_mapping, self.query_start_loc, self.seq_lens,
                  self.block_tables, self.logit_rows]
        if staging is not None:
            tensors = staging.to_device(arrays)
        else:
            tensors = [torch.from_numpy(array).to(device) for array in arrays]
        input_ids, positions, slot_mapping, query_start_loc, seq_lens, block_tables, logit_rows = tensors
        q_lens = np.diff(self.query_start_loc)
        attn = AttentionMetadata(slot_mapping, query_start_loc, seq_lens, block_tables,
                                 max_query_len=int(q_lens.max()), max_seq_len=int(self.seq_lens.max()),
                                 min_query_len=int(q_lens.min()),
                                 recurrent=None if self.state_slots is None else self._recurrent_batch(device))
        lora_slots = None if self.lora_slots is None else torch.from_numpy(self.lora_slots).to(device)
        return StepInputs(input_ids, positions, attn, logit_rows, lora_slots)

    def _recurrent_batch(self, device: torch.device) -> RecurrentBatch:
        starts, q_lens = self.query_start_loc[:-1].astype(np.int64), np.diff(self.query_start_loc)
        continuing = self.seq_lens > q_lens  # state from earlier steps
        decode = (q_lens == 1) & continuing
        prefill = ~decode
        rows = np.concatenate([np.arange(start, start + n) for start, n in zip(starts[prefill], q_lens[prefill])]
                              or [np.zeros(0, dtype=np.int64)])
        arrays = [starts[decode], self.state_slots[decode], rows.astype(np.int64), self.state_slots[prefill],
                  np.concatenate(([0], np.cumsum(q_lens[prefill]))).astype(np.int32), continuing[prefill]]
        return RecurrentBatch(*(torch.from_numpy(np.ascontiguousarray(array)).to(device) for array in arrays))


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
    sampled = sampled_rows(batch)
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
        lora_slots=_lora_slots(batch),
        state_slots=_state_slots(batch),
    )
    return plan, LogitRows([batch.seqs[i] for i in sampled], prompt_slices)


def _lora_slots(batch: ScheduledBatch) -> np.ndarray | None:
    """Each new token's adapter slot, built once per step for every LoRA layer; None when no sequence of the
    batch has an adapter, so a base-model step runs no LoRA work at all."""
    if all(seq.lora_slot < 0 for seq in batch.seqs):
        return None
    return np.repeat(np.array([seq.lora_slot for seq in batch.seqs], dtype=np.int64), batch.num_new_tokens)


def _state_slots(batch: ScheduledBatch) -> np.ndarray | None:
    """Each sequence's recurrent state slot; None when the model keeps no state (no sequence holds a slot)."""
    if batch.seqs[0].state_slot < 0:
        return None
    return np.array([seq.state_slot for seq in batch.seqs], dtype=np.int64)


def sampled_rows(batch: ScheduledBatch) -> list[int]:
    """The batch's sequences that sample a token this step: every token of theirs is computed by its end."""
    return [i for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_new_tokens))
            if seq.num_computed_tokens + n == len(seq) and not seq.prefill_only]


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


class HostStaging:
    """One pinned host buffer and its device twin: a step's arrays cross in one non-blocking copy.

    Seven separate pageable copies per step each wait for the GPU; one pinned copy is queued on the
    stream and returns at once. The host buffer is refilled only after the previous copy is done.
    """

    _ALIGN = 8  # every array starts on an 8-byte boundary, so it can be viewed as int64 on the device

    def __init__(self, device: torch.device):
        self.device = device
        self.host = self.on_device = None
        self.copied = None  # a CUDA event once a copy has been queued

    def to_device(self, arrays: list[np.ndarray]) -> list[torch.Tensor]:
        spans = []
        offset = 0
        for array in arrays:
            spans.append(offset)
            offset += -(-array.nbytes // self._ALIGN) * self._ALIGN
        self._reserve(offset)
        if self.copied is not None:
            self.copied.synchronize()
        host = self.host.numpy()
        for array, start in zip(arrays, spans):
            host[start:start + array.nbytes] = np.ascontiguousarray(array).view(np.uint8).ravel()
        self.on_device[:offset].copy_(self.host[:offset], non_blocking=True)
        if self.device.type == "cuda":
            self.copied = torch.cuda.Event()
            self.copied.record()
        return [self.on_device[start:start + array.nbytes].view(_TORCH_DTYPES[array.dtype]).view(array.shape)
                for array, start in zip(arrays, spans)]

    def _reserve(self, nbytes: int) -> None:
        if self.host is not None and self.host.numel() >= nbytes:
            return
        size = max(1 << 16, 1 << (nbytes - 1).bit_length())
        if self.copied is not None:
            self.copied.synchronize()  # the old buffers may still be in flight
        self.host = torch.empty(size, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        self.on_device = torch.empty(size, dtype=torch.uint8, device=self.device)


_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32}
