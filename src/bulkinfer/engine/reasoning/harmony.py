"""gpt-oss's reasoning: its analysis channel, apart from the answer it writes in the final channel.

gpt-oss's chat template ends the prompt with `<|start|>assistant`; the model then writes
`<|channel|>analysis<|message|>...<|end|>` and `<|start|>assistant<|channel|>final<|message|>...<|return|>`.
A tool call (`to=functions.NAME`, in the commentary channel) belongs to the answer and is kept whole there,
markers and all, for the tool-call parser to read (engine/tools/harmony.py); the answer's other messages
give their content only.
"""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.harmony import HarmonyMessage, HarmonyReader, is_function_call
from bulkinfer.engine.reasoning.base import Phase, ReasoningParser, ReasoningSplit

END_OF_REASONING = "<|end|><|start|>assistant<|channel|>final<|message|>"


class HarmonyReasoningParser(ReasoningParser):
    """The phase follows the channel of the last message opened: analysis is reasoning, any other channel
    (final, commentary) the answer, which lasts to the end: nothing the model writes after its answer
    begins is counted as thinking."""

    name = "gpt_oss"

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.reader = HarmonyReader(tokenizer)
        self.tokens = self.reader.tokens
        self._end_of_reasoning = tokenizer.encode(END_OF_REASONING, add_special_tokens=False)

    def start(self, prompt_ids: list[int]) -> Phase:
        open_in_prompt = self.reader.open_message(prompt_ids)
        if open_in_prompt is None or not open_in_prompt[1]:
            return Phase.PREAMBLE
        return self._phase_of(open_in_prompt[0])

    def advance(self, phase: Phase, output_ids: list[int]) -> Phase:
        if phase is Phase.ANSWER or output_ids[-1] != self.tokens.message:
            return phase
        header = self._header_before(phase, output_ids)
        return phase if header is None else self._phase_of(header)

    def _header_before(self, phase: Phase, output_ids: list[int]) -> list[int] | None:
        """The header the `<|message|>` just written closes; None when it closes none (a stray)."""
        starts = [i for i, token in enumerate(output_ids) if token == self.tokens.start]
        if not starts and phase is not Phase.PREAMBLE:  # the prompt opened this message's content
            return None
        header = output_ids[starts[-1] + 1:-1] if starts else output_ids[:-1]
        if any(token == self.tokens.message or token in self.tokens.terminators for token in header):
            return None
        return header

    def _phase_of(self, header_ids: list[int]) -> Phase:
        opened = HarmonyMessage(header=self.reader.decode(header_ids), opened=True)
        return Phase.REASONING if opened.is_reasoning else Phase.ANSWER

    def end_of_reasoning_ids(self) -> list[int]:
        return list(self._end_of_reasoning)

    def split(self, prompt_ids: list[int], output_ids: list[int]) -> ReasoningSplit:
        messages = self.reader.read(prompt_ids, output_ids)
        reasoning: list[int] = []
        answer: list[int] = []
        for message in messages:
            if message.is_loose_text:
                answer += message.content_ids
            elif not message.opened:
                answer += self._unopened_text(message)
            elif message.is_reasoning:
                reasoning += message.content_ids
            elif is_function_call(message.recipient):
                answer += message.whole_ids
            else:
                answer += message.content_ids
        thoughts = [message for message in messages if message.opened and message.is_reasoning]
        # The reasoning is closed by its terminator, or by the next message the model began without one.
        closed = not thoughts or thoughts[-1].terminator is not None or thoughts[-1] is not messages[-1]
        return ReasoningSplit(reasoning, answer, closed)

    def _unopened_text(self, message: HarmonyMessage) -> list[int]:
        """A header the output ended in is markup cut short, unless the model wrote no marker at all: then
        it ignored the format, and what it wrote is its answer."""
        if any(token in self.tokens.markers for token in message.written_ids):
            return []
        return message.written_ids
