"""Each step's token masks for the constrained rows it samples, computed while the model runs.

A row's mask for step N depends only on the tokens it had before step N, so the engine starts the
masks as soon as the step is scheduled and waits for them only after the forward pass: on a GPU the
masks of step N are computed on the CPU while the device runs step N's model. llguidance's
executor fills the rows in parallel threads and releases the GIL. Unconstrained rows are not
touched; a step without constrained rows costs nothing.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import llguidance
import llguidance.torch
import torch

from bulkinfer.engine.sequence import Sequence


@dataclass
class PendingMasks:
    rows: list[int]  # rows of the step's sampled logits that are constrained
    done: Future[tuple[float, torch.Tensor | None]]  # seconds the masks took; on the CPU, the forbidden tokens


class GrammarMasks:
    def __init__(self, vocab_size: int, max_rows: int, device: torch.device):
        self.vocab_size = vocab_size
        self.device = device
        self.bitmask = llguidance.torch.allocate_token_bitmask(max_rows, vocab_size)
        self._executor = llguidance.LLExecutor()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="bulkinfer-masks")
        # Bit i of a mask word, as an int32 (bit 31 is its sign bit): & and != 0 unpack twice as fast as shifts.
        self._bits = torch.tensor([1 << i if i < 31 else -(1 << 31) for i in range(32)], dtype=torch.int32)
        self._bits_on_device = self._bits.to(device)
        self.seconds = 0.0  # spent computing masks, over every step
        self.rows_masked = 0
        self.steps_masked = 0

    def start(self, sampled: list[Sequence]) -> PendingMasks | None:
        """Begin the masks of ``sampled`` (the step's sampled sequences, in logit-row order)."""
        rows = [row for row, seq in enumerate(sampled) if seq.matcher is not None]
        if not rows:
            return None
        if len(rows) > self.bitmask.shape[0]:
            self.bitmask = llguidance.torch.allocate_token_bitmask(len(rows), self.vocab_size)
        matchers = [(sampled[row].matcher, index) for index, row in enumerate(rows)]
        return PendingMasks(rows, self._thread.submit(self._fill, matchers, len(rows)))

    @torch.inference_mode()  # the step's logits are inference tensors, changed in place
    def apply(self, pending: PendingMasks | None, logits: torch.Tensor) -> None:
        """Set the logits of every disallowed token of the constrained rows to -inf, in place."""
        if pending is None:
            return
        seconds, forbidden = pending.done.result()
        self.seconds += seconds
        self.rows_masked += len(pending.rows)
        self.steps_masked += 1
        if forbidden is None:  # on a GPU: the packed words cross, 32 times smaller, and unpack there
            words = self.bitmask[:len(pending.rows)].to(logits.device, non_blocking=True)
            forbidden = _unpack_forbidden(words, self._bits_on_device, self.vocab_size)
        if len(pending.rows) == logits.shape[0]:
            logits.masked_fill_(forbidden, float("-inf"))
            return
        index = torch.tensor(pending.rows, device=logits.device)
        logits[index] = logits[index].masked_fill(forbidden, float("-inf"))

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _fill(self, matchers: list[tuple[llguidance.LLMatcher, int]], count: int) -> tuple[float, torch.Tensor | None]:
        """On the CPU the masks are also unpacked here, in this thread, off the step's critical path."""
        start = time.perf_counter()
        llguidance.torch.fill_next_token_bitmask_par(self._executor, matchers, self.bitmask)
        forbidden = None
        if self.device.type == "cpu":
            forbidden = _unpack_forbidden(self.bitmask[:count], self._bits, self.vocab_size)
        return time.perf_counter() - start, forbidden


def _unpack_forbidden(words: torch.Tensor, bits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[rows, words] int32, a set bit per allowed token -> [rows, vocab_size] bool, True where forbidden."""
    return ((words[:, :, None] & bits) == 0).flatten(1)[:, :vocab_size]
