"""What every reasoning parser provides, so the engine can track a sequence's phase token by token.

A thinking model writes its reasoning, then its answer. The engine needs to know, at every step, which of
the two a sequence is writing: the thinking budget counts reasoning tokens, and a structured-output
constraint applies from the first answer token. A parser reads token ids, never decoded text, so a marker is
found however the detokenizer would have spaced it.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar


class Phase(enum.Enum):
    """What a sequence is writing now."""

    PREAMBLE = "preamble"  # nothing decisive yet: the model may still open its reasoning (or answer at once)
    REASONING = "reasoning"
    ANSWER = "answer"


@dataclass
class ReasoningSplit:
    """A finished output, parted: the reasoning's ids and the answer's ids, markers left out of both."""

    reasoning_ids: list[int]
    answer_ids: list[int]
    reasoning_closed: bool  # whether the reasoning's end marker was written (False: cut, e.g. by max_tokens)


class ReasoningParser(ABC):
    """One model family's reasoning format. One instance serves every sequence; a sequence's state is its Phase."""

    name: ClassVar[str]

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @abstractmethod
    def start(self, prompt_ids: list[int]) -> Phase:
        """The phase at the first output token (a template may open the reasoning in the prompt)."""

    @abstractmethod
    def advance(self, phase: Phase, output_ids: Sequence[int]) -> Phase:
        """The phase after output_ids[-1] was appended; it may look back at earlier ids for a marker split
        across tokens. ``output_ids`` is a read-only view (len, indexing and slicing), not a copy."""

    @abstractmethod
    def end_of_reasoning_ids(self) -> list[int]:
        """The ids a thinking budget forces to close the reasoning and open the answer."""

    def opening_ids(self) -> list[int]:
        """The ids that open the reasoning. A constrained row that starts in PREAMBLE gets them forced, so that
        it reasons before the answer its constraint shapes; [] leaves the opening to the model."""
        return []

    @abstractmethod
    def split(self, prompt_ids: list[int], output_ids: list[int]) -> ReasoningSplit:
        """Part a whole output into reasoning and answer."""
