"""Decides, every step, which sequences run and how many of their tokens.

One token budget covers decode tokens and prefill chunks alike, so a step can mix both and a long
prompt is prefilled in chunks across steps (continuous batching with chunked prefill). Running
sequences go first, oldest first; waiting ones join while budget, sequence slots and blocks last.
When blocks run out, the newest running sequence is preempted: its blocks are freed and it is
recomputed later, which keeps the oldest always moving, so the engine can neither crash nor stall.
A hybrid model's sequence also holds a slot of the recurrent state pool while it runs: it joins only with a free
slot, and preemption frees the slot with the blocks (its state is rebuilt by the recomputation).
A sequence with a LoRA adapter joins only when its adapter has a slot; otherwise it waits for a running
sequence to finish and free one (the running ones never wait for slots, so this cannot deadlock).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from bulkinfer.engine.block_manager import BlockManager
from bulkinfer.engine.lora.slots import LoRASlots
from bulkinfer.engine.sequence import Sequence, SequenceStatus
from bulkinfer.engine.state_pool import StateSlots


@dataclass
class ScheduledBatch:
    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)  # per sequence, this step

    def add(self, seq: Sequence, num_new: int) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(num_new)

    def __bool__(self) -> bool:
        return bool(self.seqs)


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 loras: LoRASlots | None = None, state_slots: StateSlots | None = None):
        self.block_manager = block_manager
        self.loras = loras
        self.state_slots = state_slots  # None: the model keeps no recurrent state
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        preemptions_before = self.num_preemptions
        budget = self._schedule_running(batch, self.max_num_batched_tokens)
        if self.num_preemptions == preemptions_before:
            self._schedule_waiting(batch, budget)
        return batch

    def finish(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            seq.status = SequenceStatus.FINISHED
            self._free(seq)
        self.running = [seq for seq in self.running if not seq.is_finished]

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            num_new = min(seq.num_uncomputed_tokens, budget)
            if self._make_room(seq, num_new):
                self.block_manager.allocate_slots(seq, num_new)
                batch.add(seq, num_new)
                budget -= num_new
            index += 1
        return budget

    def _make_room(self, seq: Sequence, num_new: int) -> bool:
        """Preempt the newest running sequences until seq's tokens fit; False if seq itself went."""
        while not self.block_manager.can_allocate(seq, num_new):
            victim = self.running.pop()
            self._free(victim)
            victim.reset_for_recompute()
            self.waiting.appendleft(victim)
            self.num_preemptions += 1
            if victim is seq:
                return False
        return True

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if self.state_slots is not None and self.state_slots.num_free == 0:
                break
            if self.loras is not None and not self.loras.acquire(seq):
                break
            num_new = self.block_manager.admit(seq, budget)
            if num_new == 0:
                self._release_adapter(seq)
                break
            self.waiting.popleft()
            if self.state_slots is not None:
                self.state_slots.take(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.add(seq, num_new)
            budget -= num_new

    def _free(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        if self.state_slots is not None:
            self.state_slots.release(seq)
        self._release_adapter(seq)

    def _release_adapter(self, seq: Sequence) -> None:
        if self.loras is not None:
            self.loras.release(seq)
