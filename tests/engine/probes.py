"""Direct looks into the engine's model, for tests that compare logits."""

from __future__ import annotations

import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.scheduler import ScheduledBatch
from bulkinfer.engine.sequence import Sequence


def last_logits(llm: LLM, token_ids: list[int]) -> torch.Tensor:
    """Prefill one prompt through the engine's runner and return its last-position logits."""
    seq = Sequence("probe", 0, token_ids, SamplingParams(), None)
    num_new = llm.block_manager.admit(seq, len(token_ids))
    slots = llm.scheduler.state_slots  # a hybrid model's sequence also needs a recurrent state slot
    if slots is not None:
        slots.take(seq)
    try:
        return llm.runner.execute(ScheduledBatch([seq], [num_new])).logits[0]
    finally:
        llm.block_manager.free(seq)
        if slots is not None:
            slots.release(seq)
