"""Structured outputs' grammars: compiled once per constraint, in a thread, off the engine's step loop.

The library is llguidance, chosen by measurement on this machine (docs/benchmarks.md, "Grammar
libraries"): it compiles a JSON schema about 70x faster than xgrammar, which matters when rows
bring their own schemas, and it refused no valid instance of a schema it compiled.

A compiled constraint is a pristine matcher; each sequence gets its own deep copy, which shares the
compiled grammar. The cache is bounded, so a job whose every row has its own schema does not keep
them all.

The library bounds its own work (grammar size, lexer states, work per token) and, past a bound or on
a grammar it cannot follow, puts the matcher in an error state instead of raising; from then on it
allows only end-of-sequence. A request whose matcher is in that state fails with the library's
reason (matcher_error): it never ends as a `stop` whose text does not match. The bounds count work,
not seconds, so the same row fails or succeeds on every run whatever the machine's load; the
library's defaults are kept, and the costliest constraints reach them within seconds, in a compile
thread.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance

from bulkinfer.engine.grammar_tokenizer import llguidance_tokenizer
from bulkinfer.sampling_params import Constraint

CACHE_SIZE = 1024
COMPILE_THREADS = 2
# JSON as json.dumps writes it by default: one line, ", " and ": ", no other whitespace.
JSON_FORMAT = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}
_WHAT = {"json": "schema", "regex": "regex", "choice": "choices", "grammar": "grammar"}
REASON_CHARS = 300
# The library's names for its reasons, where a user could not read them.
_REASONS = {"NoExtensionBias": "nothing this model can write matches it"}


class UnsupportedConstraint(ValueError):
    """The library refused the constraint; the message is the request's error."""


class GrammarCache:
    def __init__(self, hf_tokenizer, vocab_size: int, eos_token_ids: set[int]):
        self._tokenizer_args = (hf_tokenizer, vocab_size, eos_token_ids)
        self._tokenizer: Future[llguidance.LLTokenizer] | None = None
        self._compiled: OrderedDict[Constraint, Future[llguidance.LLMatcher]] = OrderedDict()
        self._pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="bulkinfer-grammar")

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        return self._tokenizer_future().result()

    def _tokenizer_future(self) -> Future[llguidance.LLTokenizer]:
        """Built in the pool (about a second for a 150k vocabulary) when a first request is constrained;
        it is queued ahead of every compile, so the compiles waiting for it cannot hold every thread."""
        if self._tokenizer is None:
            self._tokenizer = self._pool.submit(llguidance_tokenizer, *self._tokenizer_args)
        return self._tokenizer

    def get(self, constraint: Constraint) -> Future[llguidance.LLMatcher]:
        """The constraint's template matcher, compiling it in a thread the first time it is asked for.
        The future raises UnsupportedConstraint when the library refuses it."""
        future = self._compiled.get(constraint)
        if future is None:
            self._tokenizer_future()
            future = self._pool.submit(self._compile, constraint)
            self._compiled[constraint] = future
            if len(self._compiled) > CACHE_SIZE:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(constraint)
        return future

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, constraint: Constraint) -> llguidance.LLMatcher:
        what = _WHAT[constraint.kind]
        try:
            grammar = _grammar(constraint)
        except ValueError as exc:
            raise UnsupportedConstraint(f"unsupported {what}: {_first_line(exc)}") from None
        try:
            tokenizer = self.tokenizer
        except Exception as exc:  # noqa: BLE001 - whatever llguidance raised about this tokenizer
            raise UnsupportedConstraint(f"structured outputs are unavailable with this model's tokenizer: "
                                        f"{_first_line(exc)}") from None
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if not matcher.is_error():
            # The first mask finds what compiling leaves for later (an empty language, left recursion,
            # a lexer past its bounds), here rather than in the engine's step.
            matcher.compute_bitmask()
        if matcher.is_error():
            raise UnsupportedConstraint(f"unsupported {what}: {_reason(matcher)}")
        return matcher


def matcher_error(constraint: Constraint, matcher: llguidance.LLMatcher) -> str:
    """A request's error once its matcher has failed while generating."""
    return f"{_WHAT[constraint.kind]} could not be followed: {_reason(matcher)}"


def _grammar(constraint: Constraint) -> str:
    if constraint.kind == "json":
        return llguidance.LLMatcher.grammar_from_json_schema(constraint.text, defaults=JSON_FORMAT)
    if constraint.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(constraint.text)
    if constraint.kind == "choice":
        # One token of the lexer, not one grammar rule per choice: the parser refuses a rule with more
        # than 2,000 alternatives, and the lexer compiles 50,000 in a fraction of a second.
        return llguidance.LLMatcher.grammar_from_lark(
            "start: CHOICE\nCHOICE: " + " | ".join(json.dumps(choice) for choice in json.loads(constraint.text)))
    return llguidance.grammar_from("grammar", constraint.text)


def _reason(matcher: llguidance.LLMatcher) -> str:
    reason = _first_line(matcher.get_error())
    return _REASONS.get(reason, reason)


def _first_line(error: object) -> str:
    """The library's message quotes the constraint, which may be megabytes long: the error row holds
    the first line, cut to REASON_CHARS."""
    lines = str(error).strip().splitlines()
    line = lines[0] if lines else "refused by the grammar library"
    return line if len(line) <= REASON_CHARS else line[:REASON_CHARS] + "..."
