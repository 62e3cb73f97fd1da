"""gpt-oss's harmony format, read from token ids: the messages a model wrote, each with its channel and recipient.

gpt-oss answers in messages, `<|start|>HEADER<|message|>CONTENT<|end|>`, where the header names the role, the
channel (`analysis` for the reasoning, `final` for the answer, `commentary` for tool calls and preambles) and
a recipient (`to=functions.NAME` for a function call). The reasoning parser and the tool-call parser both
read an output through this one reader. Every marker is one special token, so the reader walks ids; only a
header's words (a channel name, a recipient) are read as decoded text, so they may span any number of tokens.

The openai-harmony package parses the same format, but its encoding needs the o200k vocabulary file, which
it downloads (or reads from TIKTOKEN_ENCODINGS_BASE, checked against a fixed hash): a job must not depend on
a download, and the tokenizer the checkpoint ships already carries every marker's id.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CHANNELS = ("analysis", "commentary", "final")
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_FIRST_WORD = re.compile(r"\s*([A-Za-z_]+)")


_MARKERS = {"start": "<|start|>", "end": "<|end|>", "message": "<|message|>", "channel": "<|channel|>",
            "constrain": "<|constrain|>", "return_": "<|return|>", "call": "<|call|>"}


def writes_harmony(vocabulary: dict[str, int]) -> bool:
    """Whether a vocabulary has every harmony marker as a token: gpt-oss's does (what ``auto`` picks on)."""
    return all(token in vocabulary for token in _MARKERS.values())


@dataclass(frozen=True)
class HarmonyTokens:
    """The ids of harmony's markers in one tokenizer."""

    start: int
    end: int
    message: int
    channel: int
    constrain: int
    return_: int
    call: int

    @classmethod
    def of(cls, tokenizer: Any) -> HarmonyTokens:
        """Raises ValueError when the tokenizer lacks a marker (it is not a harmony model's)."""
        ids = {}
        for key, token in _MARKERS.items():
            token_id = tokenizer.convert_tokens_to_ids(token)
            if not isinstance(token_id, int) or tokenizer.convert_ids_to_tokens(token_id) != token:
                raise ValueError(f"the tokenizer has no {token} token, so it cannot write the harmony format")
            ids[key] = token_id
        return cls(**ids)

    @functools.cached_property
    def terminators(self) -> frozenset[int]:
        """What ends a message: `<|end|>`, `<|return|>` (the end of the turn) or `<|call|>` (a tool call)."""
        return frozenset((self.end, self.return_, self.call))

    @functools.cached_property
    def markers(self) -> frozenset[int]:
        return frozenset((self.start, self.message, self.channel, self.constrain)) | self.terminators


@dataclass
class HarmonyMessage:
    """One message of an output, or loose text: ids written outside any message (by a model that ignores the
    format, or after a stray marker), kept as content with no header."""

    header: str = ""  # decoded with its markers: "assistant to=functions.f<|channel|>commentary <|constrain|>json"
    content_ids: list[int] = field(default_factory=list)
    written_ids: list[int] = field(default_factory=list)  # the output's ids of this message, markers included
    prompt_ids: list[int] = field(default_factory=list)  # its ids the prompt wrote, when the prompt opened it
    opened: bool = False  # whether `<|message|>` was reached (else the output ended, or broke off, in the header)
    terminator: int | None = None  # the marker that ended it; None: cut, or followed by a `<|start|>` at once
    is_loose_text: bool = False  # ids written between messages

    @property
    def channel(self) -> str | None:
        return channel_of(self.header)

    @property
    def recipient(self) -> str | None:
        found = _RECIPIENT.search(self.header)
        return found.group(1) if found else None

    @property
    def whole_ids(self) -> list[int]:
        """The message as written, the prompt's part of it included, from `<|start|>` to its terminator."""
        return self.prompt_ids + self.written_ids

    @property
    def is_reasoning(self) -> bool:
        """The analysis channel, unless the message calls a function (gpt-oss may address one from it)."""
        return self.channel == "analysis" and not is_function_call(self.recipient)


def is_function_call(recipient: str | None) -> bool:
    return recipient is not None and recipient.startswith("functions.")


def channel_of(header: str) -> str | None:
    """The word after the last `<|channel|>`; a header without the marker (the prompt wrote it) may start
    with the channel's name itself."""
    if "<|channel|>" in header:
        found = _FIRST_WORD.match(header.rsplit("<|channel|>", 1)[1])
        return found.group(1) if found else None
    found = _FIRST_WORD.match(header)
    return found.group(1) if found and found.group(1) in CHANNELS else None


class HarmonyReader:
    """Reads a prompt's open message and an output into HarmonyMessages."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.tokens = HarmonyTokens.of(tokenizer)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def open_message(self, prompt_ids: list[int]) -> tuple[list[int], bool] | None:
        """The header ids of the message the prompt leaves open for the model to go on with (as
        `<|start|>assistant`, or `<|start|>assistant<|channel|>analysis<|message|>`), and whether its
        `<|message|>` is written; None when the prompt ends between messages."""
        starts = [i for i, token in enumerate(prompt_ids) if token == self.tokens.start]
        if not starts:
            return None
        tail = prompt_ids[starts[-1] + 1:]
        if any(token in self.tokens.terminators for token in tail):
            return None
        if self.tokens.message in tail:
            return tail[:tail.index(self.tokens.message)], True
        return tail, False

    def read(self, prompt_ids: list[int], output_ids: list[int]) -> list[HarmonyMessage]:
        """The output's messages, in order; the first goes on with the prompt's open message, if any."""
        reading = _Reading(self)
        open_in_prompt = self.open_message(prompt_ids)
        if open_in_prompt is not None:
            header_ids, opened = open_in_prompt
            reading.begin(header_ids, by_prompt=[self.tokens.start, *header_ids, *[self.tokens.message] * opened])
            if opened:
                reading.open()
        for token in output_ids:
            reading.step(token)
        reading.close_header()
        return reading.messages


class _Reading:
    """One pass over an output: the messages so far and the one being written.

    Between messages, plain ids are loose text and markers other than `<|start|>` are strays, skipped.
    In a header, ids are the header's until `<|message|>`. In content, only a terminator or `<|start|>`
    ends the message: a stray `<|message|>` or `<|channel|>` there is part of its text."""

    def __init__(self, reader: HarmonyReader) -> None:
        self.reader = reader
        self.tokens = reader.tokens
        self.messages: list[HarmonyMessage] = []
        self.current: HarmonyMessage | None = None  # None, or a finished one: between messages
        self.header_ids: list[int] = []

    def begin(self, header_ids: list[int], written: Sequence[int] = (), by_prompt: Sequence[int] = ()) -> None:
        """A new message, closing the one before it (a message the model left unterminated ends here)."""
        self.close_header()
        self.current = HarmonyMessage(written_ids=list(written), prompt_ids=list(by_prompt))
        self.header_ids = list(header_ids)
        self.messages.append(self.current)

    def open(self) -> None:
        self.current.opened = True
        self.current.header = self.reader.decode(self.header_ids)

    def close_header(self) -> None:
        """A header the output ended (or broke off) in keeps what it had."""
        if self.current is not None and not self.current.opened and not self.current.is_loose_text:
            self.current.header = self.reader.decode(self.header_ids)

    def step(self, token: int) -> None:
        tokens, current = self.tokens, self.current
        if token == tokens.start:
            self.begin([], written=[token])
        elif current is None or current.terminator is not None or current.is_loose_text:
            self._between(token)
        elif not current.opened:
            current.written_ids.append(token)
            if token == tokens.message:
                self.open()
            elif token in tokens.terminators:  # a header that ends with no content
                current.terminator = token
                self.close_header()
            else:
                self.header_ids.append(token)
        else:
            current.written_ids.append(token)
            if token in tokens.terminators:
                current.terminator = token
            else:
                current.content_ids.append(token)

    def _between(self, token: int) -> None:
        if token in self.tokens.markers:
            return  # a stray marker
        if self.current is None or not self.current.is_loose_text:
            self.current = HarmonyMessage(is_loose_text=True)
            self.messages.append(self.current)
        self.current.content_ids.append(token)
        self.current.written_ids.append(token)
