"""What the engine does with a step's results: sampled tokens appended (with their logprobs, the tokens a
grammar or a thinking budget forces, the stop checks), prompts scored, and finished requests turned into
RequestOutputs.

StepOutputs owns the requests in the engine, from their admission (or refusal, or grammar compilation)
to their output; LLM only creates them and runs the model each step.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Hashable

import torch

from bulkinfer.engine.detokenizer import Detokenizer
from bulkinfer.engine.logprobs import records, top_logprobs
from bulkinfer.engine.model_runner import ModelOutput
from bulkinfer.engine.pooling.request import PoolingRequest
from bulkinfer.engine.reasoning.tracker import ReasoningTracker
from bulkinfer.engine.request import Request, StopChecker
from bulkinfer.engine.sampler import Sampler, SamplerOutput
from bulkinfer.engine.scheduler import ScheduledBatch, Scheduler
from bulkinfer.engine.sequence import Sequence
from bulkinfer.engine.stats import EngineStats
from bulkinfer.engine.tools.calls import ToolCalls
from bulkinfer.outputs import Logprob, PoolingRequestOutput, PositionLogprobs, RequestOutput


class StepOutputs:
    def __init__(self, scheduler: Scheduler, sampler: Sampler, tokenizer: Any, detokenizer: Detokenizer,
                 stop_checker: StopChecker, reasoning: ReasoningTracker | None, tool_calls: ToolCalls,
                 stats: EngineStats) -> None:
        self.scheduler = scheduler
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.detokenizer = detokenizer
        self.stop_checker = stop_checker
        self.reasoning = reasoning
        self.tool_calls = tool_calls
        self.stats = stats
        self.requests: dict[Hashable, Request] = {}
        self.refused: list[Request] = []  # refused at add time, reported by the next step
        self.compiling: dict[Hashable, Future] = {}  # constrained requests whose grammar is not ready yet

    def __len__(self) -> int:
        """Requests not yet reported: in the engine, or refused."""
        return len(self.requests) + len(self.refused)

    def admit(self, request: Request, grammar: Future | None) -> None:
        """Take the request in: scheduled now, or once its grammar (being compiled) is ready."""
        if self.reasoning is not None and not request.seqs[0].prefill_only:
            for seq in request.seqs:
                self._begin_reasoning(seq, constrained=request.constraint is not None)
        self.requests[request.request_id] = request
        if grammar is not None:
            # Scheduled once its grammar is compiled; until then the engine runs the other requests.
            self.compiling[request.request_id] = grammar
            return
        for seq in request.seqs:
            self.scheduler.add(seq)

    def refuse(self, request: Request) -> None:
        """A request refused at add time (its error set): its output comes with the next step's."""
        self.refused.append(request)

    def take_refused(self) -> list[RequestOutput]:
        """The outputs of the requests refused since the last call, after scheduling the constrained
        requests whose grammar is now ready (or refusing those it could not be made for)."""
        self._admit_compiled()
        refused, self.refused = self.refused, []
        return [self._output(request) for request in refused]

    def process(self, batch: ScheduledBatch, output: ModelOutput) -> list[RequestOutput]:
        """The step's results taken into its sequences; the outputs of the requests that finished."""
        self._advance(batch)
        self._record_prompt_logprobs(output)
        return self._finish_prefill_only(batch) + self._take_sampled_tokens(output)

    def _output(self, request: Request | PoolingRequest) -> RequestOutput | PoolingRequestOutput:
        if isinstance(request, PoolingRequest):  # pooled by the model runner: nothing was written to decode
            return request.output()
        return request.output(self.detokenizer, self.reasoning, self.tool_calls)

    def _admit_compiled(self) -> None:
        """With nothing else to run, wait for a grammar rather than spin."""
        if not self.compiling:
            return
        if not self.scheduler.running and not self.scheduler.waiting:
            wait(self.compiling.values(), return_when=FIRST_COMPLETED)
        for request_id, future in list(self.compiling.items()):
            if not future.done():
                continue
            del self.compiling[request_id]
            request = self.requests[request_id]
            try:
                template = future.result()
            except ValueError as exc:  # UnsupportedConstraint: that request's error, not the engine's
                request.error = str(exc)
                del self.requests[request_id]
                self.refuse(request)
                continue
            for seq in request.seqs:
                seq.matcher = template.deep_copy()
                self.scheduler.add(seq)

    def _advance(self, batch: ScheduledBatch) -> None:
        for seq, num_new in zip(batch.seqs, batch.num_new_tokens):
            prompt_part = max(min(seq.num_computed_tokens + num_new, seq.num_prompt_tokens)
                              - seq.num_computed_tokens, 0)
            self.stats.prompt_tokens += prompt_part
            seq.num_computed_tokens += num_new

    def _record_prompt_logprobs(self, output: ModelOutput) -> None:
        for seq, first, top in output.prompt_scores:
            targets = seq.scored_ids[first:first + len(top)]
            # Scoring requests skip decoding each token's text: they can be whole documents.
            tokenizer = None if seq.prefill_only else self.tokenizer
            found = records(top, targets, [seq.params.prompt_logprobs] * len(top), tokenizer)
            if seq.prompt_logprobs is None:
                seq.prompt_logprobs = [None] * first  # positions before the first scored one
            # By position: a preempted sequence scores its prompt again when it is recomputed.
            seq.prompt_logprobs[first:first + len(found)] = found

    def _finish_prefill_only(self, batch: ScheduledBatch) -> list[RequestOutput]:
        done = [seq for seq in batch.seqs if seq.prefill_only and seq.num_uncomputed_tokens == 0]
        self.scheduler.finish(done)
        return self._collect_finished(done)

    def _take_sampled_tokens(self, output: ModelOutput) -> list[RequestOutput]:
        if not output.sample_seqs:
            return []
        sampled = self.sampler(output.logits, output.sample_seqs)
        logprob_records = self._sampled_logprobs(output.sample_seqs, sampled)
        done = []
        for row, (seq, token) in enumerate(zip(output.sample_seqs, sampled.token_ids)):
            constrained = seq.grammar_active  # the token was drawn under the grammar's mask
            self._append(seq, [token])
            if seq.logprobs is not None:
                record = logprob_records[row]
                seq.logprobs.append(record)
                seq.cumulative_logprob += record[token].logprob
            if constrained:
                seq.matcher.consume_token(token)
            if self.stop_checker.check(seq) or self._close_over_budget(seq) or self._jump_forward(seq):
                done.append(seq)
        self.stats.generation_tokens += len(sampled.token_ids)
        self.scheduler.finish(done)
        return self._collect_finished(done)

    def _sampled_logprobs(self, seqs: list[Sequence], sampled: SamplerOutput) -> dict[int, PositionLogprobs]:
        """The records of every row that asked for logprobs, ranked in one batch."""
        rows = [row for row, seq in enumerate(seqs) if seq.logprobs is not None]
        if not rows:
            return {}
        device = sampled.logprobs.device
        chosen = [sampled.token_ids[row] for row in rows]
        ks = [seqs[row].params.logprobs for row in rows]
        top = top_logprobs(sampled.logprobs[torch.tensor(rows, device=device)], torch.tensor(chosen, device=device),
                           max(ks))
        return dict(zip(rows, records(top, chosen, ks, self.tokenizer)))

    def _append(self, seq: Sequence, tokens: list[int]) -> None:
        for token in tokens:
            seq.append_token(token)
            if self.reasoning is not None:
                self.reasoning.appended(seq)

    def _append_forced(self, seq: Sequence, tokens: list[int]) -> None:
        """Tokens the engine writes for the model, in one go: the next step computes them as one chunk. A
        forced token's logprob is 0, with no alternatives: the engine chose it with certainty."""
        self._append(seq, tokens)
        if seq.logprobs is not None:
            seq.logprobs.extend({token: Logprob(0.0, 1, self.tokenizer.decode([token]))} for token in tokens)
        self.stats.generation_tokens += len(tokens)

    def _begin_reasoning(self, seq: Sequence, constrained: bool) -> None:
        """The sequence's first phase, and what is forced before its first token: the opening of a constrained
        row's reasoning, the close of a budget of 0. One token is always left for the model to write."""
        room = seq.params.max_tokens - 1
        opening = self.reasoning.begin(seq, constrained)[:room]
        self._append_forced(seq, opening)
        self._append_forced(seq, self.reasoning.over_budget(seq)[:room - len(opening)])

    def _close_over_budget(self, seq: Sequence) -> bool:
        """Once the sequence has written its thinking budget, force the end of its reasoning; returns whether
        the sequence is now done."""
        if self.reasoning is None:
            return False
        forced = self.reasoning.over_budget(seq)[:seq.params.max_tokens - seq.num_output_tokens]
        if not forced:
            return False
        self._append_forced(seq, forced)
        return self.stop_checker.check(seq)

    def _jump_forward(self, seq: Sequence) -> bool:
        """Append the tokens the grammar forces next, all at once: the next step computes them as one
        chunk instead of one forward pass each. Not for sequences that record logprobs (forced tokens
        have none). Returns whether the sequence is now done."""
        if not seq.grammar_active or seq.logprobs is not None:
            return False
        room = seq.params.max_tokens - seq.num_output_tokens
        forced = seq.matcher.compute_ff_tokens()[:room]
        if not forced:
            return False
        seq.matcher.consume_tokens(forced)
        self._append(seq, forced)
        self.stats.jump_forward_tokens += len(forced)
        self.stats.generation_tokens += len(forced)
        return self.stop_checker.check(seq)

    def _collect_finished(self, seqs: list[Sequence]) -> list[RequestOutput]:
        outputs = []
        for request_id in dict.fromkeys(seq.request_id for seq in seqs):
            request = self.requests[request_id]
            if request.finished:
                output = self._output(request)
                self.stats.count_output(output)
                outputs.append(output)
                del self.requests[request_id]
        return outputs
