"""A user's request: one prompt, n sequences sampling from it, and when each of them must stop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bulkinfer.engine.detokenizer import Detokenizer
from bulkinfer.engine.grammar import matcher_error
from bulkinfer.engine.reasoning.base import Phase
from bulkinfer.engine.reasoning.tracker import ReasoningTracker
from bulkinfer.engine.sequence import Sequence
from bulkinfer.engine.tools.calls import ToolCalls
from bulkinfer.outputs import CompletionOutput, RequestOutput
from bulkinfer.sampling_params import Constraint, SamplingParams

# A sequence's finish reason once its grammar failed; its request then fails (never seen in an output).
GRAMMAR_FAILED = "grammar_failed"


@dataclass
class Request:
    request_id: Any
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence]
    error: str | None = None
    constraint: Constraint | None = None  # what its output must match: its params' constraint, or forced tool calls

    @property
    def finished(self) -> bool:
        return self.error is not None or all(seq.is_finished for seq in self.seqs)

    def output(self, detokenizer: Detokenizer, reasoning: ReasoningTracker | None = None,
               tool_calls: ToolCalls | None = None) -> RequestOutput:
        """The request's result; with a reasoning tracker, each sample's reasoning apart from its answer, and
        with tool calls, the calls read out of the answer when the request carried tools."""
        error = self.error or self._grammar_error()
        completions = []
        for seq in [] if error else self.seqs:
            completion, answer_ids = _completion(seq, detokenizer, reasoning)
            if tool_calls is not None:
                tool_calls.read(completion, answer_ids, self.request_id, self.params)
            completions.append(completion)
        prompt_logprobs = self.seqs[0].prompt_logprobs if self.seqs and not error else None
        num_cached_tokens = self.seqs[0].num_cached_tokens if self.seqs and not error else None
        return RequestOutput(self.request_id, self.prompt, self.prompt_token_ids, completions,
                             prompt_logprobs=prompt_logprobs, num_cached_tokens=num_cached_tokens, error=error)

    def _grammar_error(self) -> str | None:
        failed = next((seq for seq in self.seqs if seq.finish_reason == GRAMMAR_FAILED), None)
        return None if failed is None else matcher_error(self.constraint, failed.matcher)


def _completion(seq: Sequence, detokenizer: Detokenizer,
                reasoning: ReasoningTracker | None) -> tuple[CompletionOutput, list[int]]:
    """The sample's output, and its answer's ids (markers left out), which the tool-call parser reads."""
    cumulative = seq.cumulative_logprob if seq.logprobs is not None else None
    output = CompletionOutput(seq.index, "", seq.output_token_ids, cumulative, seq.logprobs, seq.finish_reason,
                              seq.stop_reason)
    answer_ids = output.token_ids
    if reasoning is not None and not seq.prefill_only:
        split = reasoning.split(seq)
        output.reasoning = detokenizer.text_of(seq, split.reasoning_ids)
        output.num_reasoning_tokens = len(split.reasoning_ids)
        answer_ids = split.answer_ids
    # Text cut at a stop string was built while running (the answer's only); any other is decoded once, here.
    output.text = seq.text if isinstance(seq.stop_reason, str) else _answer_text(seq, answer_ids, detokenizer)
    return output, answer_ids


def _answer_text(seq: Sequence, answer_ids: list[int], detokenizer: Detokenizer) -> str:
    """An answer that ends the output is decoded after the tokens before it, as it was written; one gathered
    from several messages (harmony's) on its own."""
    first = len(seq) - len(answer_ids)
    if seq.token_ids[first:] == answer_ids:
        return detokenizer.text_from(seq, first)
    return detokenizer.text_of(seq, answer_ids)


def params_refusal(params: SamplingParams, vocab_size: int, max_n: int, reasons: bool = False) -> str | None:
    """Why this model cannot run a request with these settings, which are valid on their own; None if it can.
    ``reasons``: whether the model has a reasoning parser."""
    if params.n > max_n:
        return f"n {params.n} is above max_n ({max_n})"
    if params.thinking_budget is not None and not reasons:
        return ("thinking_budget needs a reasoning parser, and this model has none "
                "(see reasoning_parser in docs/reasoning.md)")
    outside = [token for token in params.logit_bias or {} if token >= vocab_size]
    if outside:
        return f"logit_bias token id {outside[0]} is outside the model's vocabulary (size {vocab_size})"
    for name in ("logprobs", "prompt_logprobs"):
        # A record lists at most the whole vocabulary; asking for more is a mistake, not a wish for all of it.
        if (getattr(params, name) or 0) > vocab_size:
            return f"{name} {getattr(params, name)} is above the model's vocabulary size ({vocab_size})"
    return None


class StopChecker:
    """Decides after each new token whether a sequence is done, and why."""

    def __init__(self, eos_token_ids: set[int], detokenizer: Detokenizer):
        self.eos_token_ids = eos_token_ids
        self.detokenizer = detokenizer

    def check(self, seq: Sequence) -> bool:
        token, params = seq.token_ids[-1], seq.params
        # First: a failed matcher allows only end-of-sequence, which would otherwise read as a `stop`.
        if seq.grammar_active and seq.matcher.is_error():
            return self._finish(seq, GRAMMAR_FAILED, None)
        if token in params.stop_token_ids:
            return self._finish(seq, "stop", token)
        if not params.ignore_eos and token in self.eos_token_ids:
            return self._finish(seq, "stop", None)
        # A stop string counts once min_tokens are out, as in vLLM; the text is still kept up to date.
        # A stop string ends the answer; a thinking model's reasoning is not searched.
        if (params.stop and seq.phase is Phase.ANSWER
                and self._hit_stop_string(seq, seq.num_output_tokens > params.min_tokens)):
            return True
        if seq.grammar_active and seq.matcher.is_stopped():  # the grammar is complete and allows nothing more
            return self._finish(seq, "stop", None)
        if seq.num_output_tokens >= params.max_tokens:
            return self._finish(seq, "length", None)
        return False

    def _hit_stop_string(self, seq: Sequence, search: bool) -> bool:
        new_start = self.detokenizer.append_new_text(seq)
        if not search:
            return False
        longest = max(len(s) for s in seq.params.stop)
        search_from = max(new_start - longest + 1, 0)  # a stop string may straddle the old text
        found = [(seq.text.find(s, search_from), s) for s in seq.params.stop]
        found = [(at, s) for at, s in found if at >= 0]
        if not found:
            return False
        at, stop = min(found)
        seq.text = seq.text[:at + len(stop) if seq.params.include_stop_str_in_output else at]
        return self._finish(seq, "stop", stop)

    @staticmethod
    def _finish(seq: Sequence, reason: str, stop_reason: int | str | None) -> bool:
        seq.finish_reason, seq.stop_reason = reason, stop_reason
        return True
