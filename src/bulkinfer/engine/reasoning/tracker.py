"""The engine's use of a reasoning parser: each sequence's phase as its tokens are appended, and the ids a
thinking budget or a constrained answer forces.

One tracker serves every sequence; a sequence's state is its ``phase``, its count of reasoning tokens and
where its answer starts. Models without a parser have no tracker: their sequences stay in ANSWER and pay
nothing.
"""

from __future__ import annotations

from bulkinfer.engine.reasoning.base import Phase, ReasoningParser, ReasoningSplit
from bulkinfer.engine.reasoning.effort import thinking_budget
from bulkinfer.engine.sequence import Sequence


class ReasoningTracker:
    def __init__(self, parser: ReasoningParser) -> None:
        self.parser = parser

    def begin(self, seq: Sequence, constrained: bool) -> list[int]:
        """Set the sequence's first phase from its prompt; returns the ids to append before it runs. A
        constrained row whose template leaves the opening to the model gets it opened, so that it reasons
        before the answer its constraint shapes."""
        seq.phase = self.parser.start(seq.prompt_token_ids)
        if seq.phase is Phase.PREAMBLE and constrained:
            return self.parser.opening_ids()
        return []

    def appended(self, seq: Sequence) -> None:
        """After one token was appended to the sequence."""
        before = seq.phase
        if before is Phase.ANSWER:
            return
        if before is Phase.REASONING:
            seq.reasoning_written += 1
        seq.phase = self.parser.advance(before, seq.output_view)
        if seq.phase is Phase.ANSWER:
            # From the preamble, everything written is the answer; from the reasoning, what follows the marker.
            seq.answer_start = len(seq) if before is Phase.REASONING else seq.num_prompt_tokens

    def over_budget(self, seq: Sequence) -> list[int]:
        """The end of the reasoning, once the sequence has written its thinking budget of reasoning tokens."""
        budget = thinking_budget(seq.params, self.parser.name)
        if seq.phase is Phase.REASONING and budget is not None and seq.reasoning_written >= budget:
            return self.parser.end_of_reasoning_ids()
        return []

    def split(self, seq: Sequence) -> ReasoningSplit:
        return self.parser.split(seq.prompt_token_ids, seq.output_token_ids)
