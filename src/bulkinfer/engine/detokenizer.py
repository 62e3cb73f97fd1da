"""Output text from token ids, decoded with a few prompt tokens before it so spacing comes out right.

Only requests with stop strings need text while they run; they decode a short window per step
(the tokens since the last complete character) instead of the whole output, and only once the answer has
begun: stop strings apply to a thinking model's answer, not to its reasoning.
"""

from __future__ import annotations

from bulkinfer.engine.sequence import Sequence

_CONTEXT_TOKENS = 5  # prompt tokens decoded before the output, for tokenizers that strip a leading space


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def full_text(self, seq: Sequence) -> str:
        return self.text_from(seq, seq.num_prompt_tokens)

    def text_from(self, seq: Sequence, first: int) -> str:
        """The text of seq.token_ids[first:], decoded after the tokens before it."""
        return self._difference(seq, max(first - _CONTEXT_TOKENS, 0), first, len(seq))

    def text_of(self, seq: Sequence, token_ids: list[int]) -> str:
        """The text of ids apart from the sequence (a thinking model's reasoning)."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=seq.params.skip_special_tokens)

    def append_new_text(self, seq: Sequence) -> int:
        """Extend seq.text with what the latest tokens spell; returns where the new text starts. The text is
        the answer's: a thinking model's reasoning is left out."""
        if seq.read_offset is None:
            seq.prefix_offset = max(seq.answer_start - _CONTEXT_TOKENS, 0)
            seq.read_offset = seq.answer_start
        new_text = self._difference(seq, seq.prefix_offset, seq.read_offset, len(seq))
        old_length = len(seq.text)
        if new_text and not new_text.endswith("\ufffd"):  # wait until a multi-byte character is whole
            seq.text += new_text
            seq.prefix_offset, seq.read_offset = seq.read_offset, len(seq)
        return old_length

    def _difference(self, seq: Sequence, start: int, known: int, end: int) -> str:
        """The text of tokens [known, end) as decoded after tokens [start, known)."""
        skip = seq.params.skip_special_tokens
        before = self.tokenizer.decode(seq.token_ids[start:known], skip_special_tokens=skip)
        after = self.tokenizer.decode(seq.token_ids[start:end], skip_special_tokens=skip)
        return after[len(before):]
