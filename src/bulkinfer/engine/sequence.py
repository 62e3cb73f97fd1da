"""A Sequence is one sample being generated: its tokens, its place in the KV cache, its state."""

from __future__ import annotations

import enum
from collections.abc import Sequence as SequenceOf
from typing import Any, overload

import torch

from bulkinfer.engine.reasoning.base import Phase
from bulkinfer.outputs import PositionLogprobs
from bulkinfer.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(self, request_id: Any, index: int, prompt_token_ids: list[int], params: SamplingParams,
                 generator: torch.Generator | None, score_from: int | None = None,
                 scored_ids: list[int] | None = None, pooler: Any = None, lora: Any = None):
        self.request_id = request_id
        self.index = index  # which of the request's n samples this is
        self.prompt_token_ids = prompt_token_ids
        self.token_ids = list(prompt_token_ids)  # prompt then output
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.generator = generator
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0  # tokens whose K/V are in the cache
        self.num_cached_tokens = 0  # of those, how many came from the prefix cache
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # prefix-cache hashes of its full blocks, in order
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.text = ""  # kept up to date while running only when stop strings need it
        self.prefix_offset = 0  # incremental detokenizer's window, see engine/detokenizer.py
        self.read_offset: int | None = None
        self.cumulative_logprob = 0.0
        self.logprobs: list[PositionLogprobs] | None = [] if params.logprobs is not None else None
        self.prompt_logprobs: list[PositionLogprobs | None] | None = None
        # The first prompt position whose log-probability is recorded (None: none is); such
        # positions must be computed, so the prefix cache may serve only the tokens before them.
        self.score_from = 1 if params.prompt_logprobs is not None and score_from is None else score_from
        # The tokens scored, by position: the prompt's own, or for a scoring request the whole
        # text, whose last token is only ever a target and so is not part of the prompt.
        self.scored_ids = prompt_token_ids if scored_ids is None else scored_ids
        self.pooler = pooler  # a pooling request's reader of its hidden states (engine/pooling/pooler.py)
        self.prefill_only = scored_ids is not None or pooler is not None  # done once the prompt is computed
        self.lora = lora  # its adapter's LoRARequest (engine/lora/), None for the base model
        self.lora_slot = -1  # the adapter's slot while it runs (engine/lora/slots.py)
        self.state_slot = -1  # a hybrid model's recurrent state slot while it runs (engine/state_pool.py)
        self.bad_word_ids: list[list[int]] = []  # token spellings of params.bad_words, see engine/logit_rules.py
        self.matcher: Any = None  # the grammar's state (an llguidance matcher) when the output is constrained
        # What it writes now; a model without a reasoning parser writes only an answer (engine/reasoning/).
        self.phase = Phase.ANSWER
        self.reasoning_written = 0  # tokens written while reasoning, which a thinking budget counts
        self.answer_start = self.num_prompt_tokens  # where the answer's tokens begin, once it has begun
        self.output_view = OutputIds(self.token_ids, self.num_prompt_tokens)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def grammar_active(self) -> bool:
        """Whether the constraint shapes the next token: a constraint applies from the answer's first token."""
        return self.matcher is not None and self.phase is Phase.ANSWER

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def max_cached_tokens(self) -> int:
        """How many leading tokens the prefix cache may serve. The last is always computed (its logits or hidden
        state are wanted), and so is every scored position and every token a mean or cls pooler reads."""
        if self.pooler is not None and self.pooler.reads_every_token:
            return 0
        return len(self) - 1 if self.score_from is None else min(len(self) - 1, self.score_from - 1)

    @property
    def cache_salt(self) -> int | None:
        """What starts its prefix-cache hash chain: the adapter, so that blocks computed under one adapter
        never serve another or the base model."""
        return None if self.lora is None else self.lora.lora_int_id

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def reset_for_recompute(self) -> None:
        """After preemption: the cache is gone, prompt and output so far are prefilled again."""
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.block_table = []
        if self.pooler is not None:
            self.pooler.reset()


class OutputIds(SequenceOf[int]):
    """A sequence's output ids, read in place: a reasoning parser looks at them after every token, and a copy
    each time would cost the whole output's length per token."""

    def __init__(self, token_ids: list[int], start: int) -> None:
        self._token_ids = token_ids
        self._start = start

    def __len__(self) -> int:
        return len(self._token_ids) - self._start

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return self._token_ids[self._start:][index] if index.step else self._slice(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("output index out of range")
        return self._token_ids[self._start + index]

    def _slice(self, index: slice) -> list[int]:
        first, last, _ = index.indices(len(self))
        return self._token_ids[self._start + first:self._start + max(first, last)]
