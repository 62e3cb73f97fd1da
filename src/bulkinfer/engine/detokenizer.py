"""Output text from token ids, decoded with a few prompt tokens before it so spacing comes out right.

Only requests with stop strings need text while they run; they decode a short window per step
(the tokens since the last complete character) instead of the whole output.
"""

from __future__ import annotations

from bulkinfer.engine.sequence import Sequence

_CONTEXT_TOKENS = 5  # prompt tokens decoded before the output, for tokenizers that strip a leading space


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def full_text(self, seq: Sequence) -> str:
        start = max(seq.num_prompt_tokens - _CONTEXT_TOKENS, 0)
        return self._difference(seq, start, seq.num_prompt_tokens, len(seq))

    def append_new_text(self, seq: Sequence) -> int:
        """Extend seq.text with what the latest tokens spell; returns where the new text starts."""
        if seq.read_offset is None:
            seq.prefix_offset = max(seq.num_prompt_tokens - _CONTEXT_TOKENS, 0)
            seq.read_offset = seq.num_prompt_tokens
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
