"""Each step's token masks for the constrained rows it samples.

A row's mask for step N depends only on the tokens it had before step N. On a GPU the engine starts
the masks as soon as the step is scheduled and waits for them only after the forward pass, so they
are computed on the CPU while the device runs step N's model; llguidance's executor fills the rows
in parallel threads and releases the GIL. On the CPU they are computed in line: the forward pass
already keeps every core busy, and a mask thread beside it slowed each step by more than the masks
cost (docs/benchmarks.md, "Structured outputs").

Applying a mask adds 0 or -inf to each logit, read from a table indexed by the mask's bytes: one
gather and one add, several times faster than unpacking bits to a boolean mask and filling with it.
Unconstrained rows are not touched, nor are a thinking model's rows while they reason (the constraint shapes
the answer); a step without constrained rows costs nothing.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import llguidance
import llguidance.torch
import torch

from bulkinfer.engine.sequence import Sequence

CPU_BIAS_SLICE_BYTES = 4 << 20


@dataclass
class PendingMasks:
    rows: list[int]  # rows of the step's sampled logits that are constrained
    done: Future[float]  # seconds the masks took to compute


class GrammarMasks:
    def __init__(self, vocab_size: int, max_rows: int, device: torch.device):
        self.vocab_size = vocab_size
        self.bitmask = llguidance.torch.allocate_token_bitmask(max_rows, vocab_size)
        self._executor = llguidance.LLExecutor()
        self._thread = None if device.type == "cpu" else ThreadPoolExecutor(1, thread_name_prefix="bulkinfer-masks")
        self._bias_tables: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        self.seconds = 0.0  # spent computing and applying masks (on the host), over every step
        self.rows_masked = 0
        self.steps_masked = 0

    def start(self, sampled: list[Sequence]) -> PendingMasks | None:
        """Begin the masks of ``sampled`` (the step's sampled sequences, in logit-row order)."""
        rows = [row for row, seq in enumerate(sampled) if seq.grammar_active]
        if not rows:
            return None
        if len(rows) > self.bitmask.shape[0]:
            self.bitmask = llguidance.torch.allocate_token_bitmask(len(rows), self.vocab_size)
        matchers = [(sampled[row].matcher, index) for index, row in enumerate(rows)]
        if self._thread is not None:
            return PendingMasks(rows, self._thread.submit(self._fill, matchers))
        done = Future()
        done.set_result(self._fill(matchers))
        return PendingMasks(rows, done)

    @torch.inference_mode()  # the step's logits are inference tensors, changed in place
    def apply(self, pending: PendingMasks | None, logits: torch.Tensor) -> None:
        """Set the logits of every disallowed token of the constrained rows to -inf, in place."""
        if pending is None:
            return
        self.seconds += pending.done.result()
        self.rows_masked += len(pending.rows)
        self.steps_masked += 1
        start = time.perf_counter()
        self._add_bias(pending.rows, logits)
        self.seconds += time.perf_counter() - start

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False, cancel_futures=True)

    def _fill(self, matchers: list[tuple[llguidance.LLMatcher, int]]) -> float:
        start = time.perf_counter()
        llguidance.torch.fill_next_token_bitmask_par(self._executor, matchers, self.bitmask)
        return time.perf_counter() - start

    def _add_bias(self, rows: list[int], logits: torch.Tensor) -> None:
        """Adds each constrained row's bias (0 or -inf per token) to its logits, slice by slice."""
        # The packed words cross to the device, 32 times smaller than the mask they expand to.
        mask_bytes = self.bitmask[:len(rows)].to(logits.device, non_blocking=True).view(torch.uint8)
        table = self._bias_table(logits)
        index = None if len(rows) == logits.shape[0] else torch.tensor(rows, device=logits.device)
        step = self._rows_per_slice(logits)
        for first in range(0, len(rows), step):
            part = slice(first, first + step)
            bias = table.index_select(0, mask_bytes[part].flatten().int()).view(-1, mask_bytes.shape[1] * 8)
            if index is None:
                logits[part].add_(bias[:, :self.vocab_size])
            else:
                logits.index_add_(0, index[part], bias[:, :self.vocab_size])

    def _rows_per_slice(self, logits: torch.Tensor) -> int:
        """On the CPU, rows whose bias fits in a few MiB of cache: a whole batch's bias at a 152k
        vocabulary is 156 MB, and made at once took several times longer than in slices. A GPU takes
        it whole."""
        if logits.device.type != "cpu":
            return logits.shape[0]
        return max(1, CPU_BIAS_SLICE_BYTES // (self.vocab_size * logits.element_size()))

    def _bias_table(self, logits: torch.Tensor) -> torch.Tensor:
        """[256, 8]: row b holds, for each bit i of the byte value b, 0 where it is set (allowed) and
        -inf where not. A mask's bytes in memory order are its tokens in order: bit i of a
        little-endian int32 word is bit i % 8 of its byte i // 8."""
        key = (logits.dtype, logits.device)
        if key not in self._bias_tables:
            allowed = (torch.arange(256)[:, None] >> torch.arange(8)) & 1
            table = torch.zeros(256, 8).masked_fill(allowed == 0, float("-inf"))
            self._bias_tables[key] = table.to(logits.dtype).to(logits.device)
        return self._bias_tables[key]
