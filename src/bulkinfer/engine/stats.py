"""Counters for progress displays and job summaries."""

from __future__ import annotations

from dataclasses import dataclass

from bulkinfer.outputs import RequestOutput


@dataclass
class EngineStats:
    prompt_tokens: int = 0  # prompt tokens computed (prefix-cache hits excluded)
    generation_tokens: int = 0
    steps: int = 0
    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    preemptions: int = 0
    prefix_cache_queried_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    # Of the finished samples' output tokens: a thinking model's reasoning (its markers left out), and the rest.
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    jump_forward_tokens: int = 0  # output tokens a grammar forced, appended without a forward pass each
    grammar_mask_seconds: float = 0.0  # computing structured outputs' token masks, over every step
    grammar_mask_steps: int = 0  # steps with at least one constrained row
    grammar_mask_rows: int = 0  # constrained rows masked, over every step
    model_impl: str = "native"  # whose code runs the model: "native" (bulkinfer's) or "transformers"
    dtype: str = ""  # what the model computes in: "bfloat16", "float32", ...
    dtype_reason: str = ""  # why: "as asked", "auto: this CPU has AVX512-BF16 and AMX", ...
    kv_cache_dtype: str = ""  # what the KV cache stores: "float32", "bfloat16", "float8_e4m3fn", ...
    kv_bytes_per_token: int = 0  # a token's keys and values over every layer (and every rank)
    state_bytes_per_seq: int = 0  # a hybrid model's recurrent state of one sequence, over every layer
    prefix_caching_off: str = ""  # why prefix caching is off although asked for; "" when it runs as asked

    def count_output(self, output: RequestOutput) -> None:
        if not isinstance(output, RequestOutput):  # a pooling request's: it writes no tokens
            return
        for completion in output.outputs:
            self.reasoning_tokens += completion.num_reasoning_tokens
            self.answer_tokens += len(completion.token_ids) - completion.num_reasoning_tokens

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hit_tokens / max(self.prefix_cache_queried_tokens, 1)
