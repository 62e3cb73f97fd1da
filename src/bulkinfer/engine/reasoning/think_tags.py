"""Reasoning between ``<think>`` and ``</think>``: DeepSeek-R1 and its distills, Qwen3, and the families that
copied them.

The two families differ in one thing: what the model is writing when nothing has opened the block yet.
DeepSeek-R1 is trained to reason first, so its output is reasoning until ``</think>`` even when its template
did not write ``<think>``. Qwen3 opens the block itself when thinking is on, so an output that does not start
with ``<think>`` is an answer. Either template may open the block in the prompt (R1's does), or end it with an
empty one (Qwen3's with ``enable_thinking=false``): the prompt's last marker decides, unless it closed the
reasoning of an earlier turn (text follows it).

A marker is matched as a run of token ids: one id where the vocabulary has the tag as a token, several
where a tokenizer spells it in pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bulkinfer.engine.reasoning.base import Phase, ReasoningParser, ReasoningSplit

START_TAG, END_TAG = "<think>", "</think>"
_MOST_SPACE_TOKENS = 4


class ThinkTagParser(ReasoningParser):
    """One family's ``<think>`` format; ``thinks_unopened``: whether an output nothing opened is reasoning."""

    thinks_unopened: bool

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.start_ids = _marker_ids(tokenizer, START_TAG)
        self.end_ids = _marker_ids(tokenizer, END_TAG)

    def start(self, prompt_ids: list[int]) -> Phase:
        opened, closed = _last_at(prompt_ids, self.start_ids), _last_at(prompt_ids, self.end_ids)
        if opened > closed:  # the template opened the block
            return Phase.REASONING
        if closed >= 0 and self._only_space(prompt_ids[closed + len(self.end_ids):]):
            return Phase.ANSWER  # the template closed it at the end: thinking is off
        return Phase.REASONING if self.thinks_unopened else Phase.PREAMBLE

    def advance(self, phase: Phase, output_ids: Sequence[int]) -> Phase:
        if phase is Phase.REASONING:
            return Phase.ANSWER if _ends_with(output_ids, self.end_ids) else Phase.REASONING
        if phase is Phase.PREAMBLE:
            written = len(output_ids)
            if list(output_ids[:written]) != self.start_ids[:written]:
                return Phase.ANSWER  # the model answered at once
            return Phase.REASONING if written == len(self.start_ids) else Phase.PREAMBLE
        return Phase.ANSWER

    def _only_space(self, ids: list[int]) -> bool:
        # A template writes at most a blank line or two after the tag; more is an earlier turn's answer.
        return len(ids) <= _MOST_SPACE_TOKENS and not self.tokenizer.decode(ids).strip()

    def end_of_reasoning_ids(self) -> list[int]:
        return list(self.end_ids)

    def opening_ids(self) -> list[int]:
        return list(self.start_ids)

    def split(self, prompt_ids: list[int], output_ids: list[int]) -> ReasoningSplit:
        phase = self.start(prompt_ids)
        begins_with_tag = output_ids[:len(self.start_ids)] == self.start_ids
        if phase is Phase.ANSWER or (phase is Phase.PREAMBLE and not begins_with_tag):
            return ReasoningSplit([], list(output_ids), reasoning_closed=phase is Phase.ANSWER)
        body = len(self.start_ids) if begins_with_tag else 0  # a tag the model wrote after the template's
        end = _first_at(output_ids, self.end_ids, body)
        if end < 0:
            return ReasoningSplit(list(output_ids[body:]), [], reasoning_closed=False)
        return ReasoningSplit(list(output_ids[body:end]), list(output_ids[end + len(self.end_ids):]),
                              reasoning_closed=True)


class DeepSeekR1Parser(ThinkTagParser):
    name = "deepseek_r1"
    thinks_unopened = True


class Qwen3Parser(ThinkTagParser):
    name = "qwen3"
    thinks_unopened = False


def _marker_ids(tokenizer: Any, tag: str) -> list[int]:
    return list(tokenizer.encode(tag, add_special_tokens=False))


def _ends_with(ids: Sequence[int], marker: list[int]) -> bool:
    return len(ids) >= len(marker) and list(ids[-len(marker):]) == marker


def _first_at(ids: list[int], marker: list[int], start: int) -> int:
    """Where ``marker`` first occurs in ``ids`` from ``start`` on; -1 when it does not."""
    first = marker[0]
    for at in range(start, len(ids) - len(marker) + 1):
        if ids[at] == first and ids[at:at + len(marker)] == marker:
            return at
    return -1


def _last_at(ids: list[int], marker: list[int]) -> int:
    """Where ``marker`` last occurs in ``ids``; -1 when it does not."""
    last = marker[-1]
    for end in range(len(ids), len(marker) - 1, -1):
        if ids[end - 1] == last and ids[end - len(marker):end] == marker:
            return end - len(marker)
    return -1
