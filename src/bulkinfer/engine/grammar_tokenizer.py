"""The tokenizer as llguidance needs it: the bytes each token id stands for.

llguidance reads the common Hugging Face tokenizer kinds itself (byte-level BPE, SentencePiece); for
any other (the demo model's character-level WordLevel one, say) the bytes are worked out here from
the token strings, so that structured outputs work with every tokenizer the engine can load.
"""

from __future__ import annotations

import re
from functools import lru_cache

import llguidance
import llguidance.hf

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback


def llguidance_tokenizer(hf_tokenizer, vocab_size: int, eos_token_ids: set[int]) -> llguidance.LLTokenizer:
    eos = sorted(eos_token_ids) or None
    try:
        return llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size, eos_token=eos)
    except (ValueError, RuntimeError, TypeError):  # a kind it does not read: give it the bytes instead
        return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_TokenBytes(hf_tokenizer, eos)), n_vocab=vocab_size)


class _TokenBytes:
    """What llguidance's TokenizerWrapper asks of a tokenizer."""

    def __init__(self, hf_tokenizer, eos: list[int] | None):
        self._tokenizer = hf_tokenizer
        self.eos_token_id = eos[0] if eos else hf_tokenizer.eos_token_id
        self.bos_token_id = hf_tokenizer.bos_token_id
        self.special_token_ids = sorted(set(hf_tokenizer.all_special_ids))
        byte_level = "ByteLevel" in hf_tokenizer.backend_tokenizer.to_str()
        pieces = hf_tokenizer.convert_ids_to_tokens(list(range(len(hf_tokenizer))))
        self.tokens = [_token_bytes(piece or "", byte_level) for piece in pieces]

    def __call__(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)


def _token_bytes(piece: str, byte_level: bool) -> bytes:
    if byte_level:
        table = _byte_level_table()
        if all(char in table for char in piece):
            return bytes(table[char] for char in piece)
    match = _BYTE_TOKEN.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace("\u2581", " ").encode("utf-8")  # SentencePiece writes a space as U+2581


@lru_cache(maxsize=1)
def _byte_level_table() -> dict[str, int]:
    """Byte-level BPE's alphabet: printable Latin-1 bytes stand for themselves, the other bytes for the
    characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    others = [byte for byte in range(256) if byte not in printable]
    table = {chr(byte): byte for byte in printable}
    table.update({chr(256 + index): byte for index, byte in enumerate(others)})
    return table
