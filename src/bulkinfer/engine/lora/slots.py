"""Which adapter sits in which of the model's ``max_loras`` slots.

A sequence takes a slot when the scheduler admits it and gives it back when it finishes or is
preempted. An adapter not in a slot is copied into a free one, or into the least recently used slot
that no running sequence holds; when every slot is held, the sequence waits for one to come free.
Adapters read from disk stay in memory, up to ``max_cpu_loras`` of them, least recently used
dropped first, so a slot can be refilled without reading the files again.
"""

from __future__ import annotations

from collections import OrderedDict

from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.engine.sequence import Sequence
from bulkinfer.models.lora.adapter import AdapterError, LoRAAdapter, load_adapter
from bulkinfer.models.lora.stacks import LoRAStacks


class LoRASlots:
    def __init__(self, stacks: LoRAStacks, max_lora_rank: int, max_cpu_loras: int):
        self.stacks = stacks
        self.max_lora_rank = max_lora_rank
        self.max_cpu_loras = max_cpu_loras
        self.known: dict[int, LoRARequest] = {}  # lora_int_id -> the request that first named it
        self.in_memory: OrderedDict[int, LoRAAdapter] = OrderedDict()  # least recently used first
        self.slot_of: OrderedDict[int, int] = OrderedDict()  # lora_int_id -> slot, least recently used first
        self.holders = [0] * stacks.max_loras  # running sequences per slot

    def refusal(self, lora: LoRARequest) -> str | None:
        """Why a request cannot use ``lora`` (unreadable, unsupported, or its id already names another
        adapter); None once it is read and fits the model."""
        known = self.known.get(lora.lora_int_id)
        if known is not None:
            if known.lora_path != lora.lora_path:
                return (f"lora_int_id {lora.lora_int_id} already names adapter {known.lora_name!r} "
                        f"at {known.lora_path}")
            return None
        try:
            self._adapter(lora)
        except AdapterError as exc:
            return str(exc)
        self.known[lora.lora_int_id] = lora
        return None

    def acquire(self, seq: Sequence) -> bool:
        """Give ``seq`` its adapter's slot (a base-model sequence needs none); False: every slot is held."""
        if seq.lora is None:
            return True
        lora_id = seq.lora.lora_int_id
        slot = self.slot_of.get(lora_id)
        if slot is None:
            slot = self._free_slot()
            if slot is None:
                return False
            self.stacks.write(slot, self._adapter(seq.lora))
        self.slot_of[lora_id] = slot
        self.slot_of.move_to_end(lora_id)
        self.holders[slot] += 1
        seq.lora_slot = slot
        return True

    def release(self, seq: Sequence) -> None:
        if seq.lora_slot >= 0:
            self.holders[seq.lora_slot] -= 1
            seq.lora_slot = -1

    def _free_slot(self) -> int | None:
        """An empty slot, else the least recently used one no sequence holds (its adapter leaves it)."""
        used = set(self.slot_of.values())
        empty = [slot for slot in range(len(self.holders)) if slot not in used]
        if empty:
            return empty[0]
        for lora_id, slot in self.slot_of.items():
            if self.holders[slot] == 0:
                del self.slot_of[lora_id]
                return slot
        return None

    def _adapter(self, lora: LoRARequest) -> LoRAAdapter:
        adapter = self.in_memory.get(lora.lora_int_id)
        if adapter is None:
            adapter = load_adapter(lora.lora_path, self.max_lora_rank)
            self.stacks.check(adapter)
            self.in_memory[lora.lora_int_id] = adapter
            while len(self.in_memory) > self.max_cpu_loras:
                self.in_memory.popitem(last=False)
        self.in_memory.move_to_end(lora.lora_int_id)
        return adapter
