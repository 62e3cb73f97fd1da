"""generate: one request per row, its prompt with the row's sampling settings; the result row holds the
generated text, its finish reason and token counts (lists when n > 1), and, when some row may ask for
them, logprobs, JSON, tool calls, and a thinking model's reasoning apart from the answer."""

from __future__ import annotations

import json

import pyarrow as pa

from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.outputs import PositionLogprobs, RequestOutput, ToolCall
from bulkinfer.runner.adapters import RowAdapters
from bulkinfer.runner.bins import order_for_engine
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import PromptRenderer, RowSettings, bounded, cut_to, encode_prompts, prompt_columns
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.base import (
    ERROR,
    PROMPT_TOKENS,
    EngineFacts,
    Row,
    result_row,
)
from bulkinfer.runner.tasks.work import Failure, PreparedWindow, Work
from bulkinfer.sampling_params import SamplingParams

_TOKEN = pa.struct([("token_id", pa.int64()), ("logprob", pa.float64())])
POSITIONS = pa.list_(pa.struct([("token_id", pa.int64()), ("logprob", pa.float64()),
                                ("top_logprobs", pa.list_(_TOKEN))]))
# A sample's tool calls, in OpenAI's order of fields; arguments is the JSON text the model wrote.
_TOOL_CALLS = pa.list_(pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())]))
# The columns of one value per sample (a list of these when a row may have n > 1), and the others, in
# output order: the reasoning beside the answer, its token count beside the output's.
_PER_SAMPLE = {"generated_text": pa.string(), "generated_reasoning": pa.string(), "finish_reason": pa.string(),
               "completion_tokens": pa.int64(), "reasoning_tokens": pa.int64(), "generated_json": pa.string(),
               "tool_calls": _TOOL_CALLS, "logprobs": POSITIONS}
_ORDER = ("generated_text", "generated_reasoning", "finish_reason", "prompt_tokens", "completion_tokens",
          "reasoning_tokens", "error", "generated_json", "tool_calls", "logprobs", "prompt_logprobs")
# The columns a job has only when some row may need them (see JobConfig.wants), and a thinking model's,
# which a job has when its model has a reasoning parser (the same on every run of the job: the model's
# files and reasoning_parser are part of its fingerprint).
REASONING_COLUMNS = ("generated_reasoning", "reasoning_tokens")
OPTIONAL_COLUMNS = (*REASONING_COLUMNS, "generated_json", "tool_calls", "logprobs", "prompt_logprobs")


class GenerateTask:
    ENGINE_TASK = "generate"

    def __init__(self, config: JobConfig, engine: EngineFacts) -> None:
        self.renderer = PromptRenderer(config, engine.tokenizer)
        self.row_settings = RowSettings(config)
        self.row_adapters = RowAdapters(config)
        self.tokenizer = engine.tokenizer
        self.max_model_len = engine.max_model_len
        self.truncate = config.truncate
        # With n > 1 possible, generation columns hold lists, one entry per sample, on every row.
        self.list_outputs = config.list_outputs
        self.types = self.result_types(config.list_outputs)
        optional = [name for name in ("logprobs", "prompt_logprobs") if config.wants(name)]
        optional += ["generated_json"] if config.json_outputs else []
        optional += list(REASONING_COLUMNS) if engine.reasons else []
        optional += ["tool_calls"] if config.tool_outputs else []
        self.columns = [name for name in _ORDER if name not in OPTIONAL_COLUMNS or name in optional]

    @staticmethod
    def input_columns(config: JobConfig) -> list[tuple[str, str]]:
        return prompt_columns(config)

    @staticmethod
    def result_types(list_outputs: bool) -> dict[str, pa.DataType]:
        samples = {name: pa.list_(t) if list_outputs else t for name, t in _PER_SAMPLE.items()}
        types = {**samples, "prompt_tokens": PROMPT_TOKENS, "error": ERROR, "prompt_logprobs": POSITIONS}
        return {name: types[name] for name in _ORDER}

    def prepare(self, window: list[SourceRow]) -> PreparedWindow:
        failures: list[Failure] = []
        ready: list[tuple[SourceRow, str, SamplingParams, LoRARequest | None]] = []
        for row in window:
            if row.error is not None:
                failures.append(Failure(row, row.error))
                continue
            try:
                params = self.row_settings.for_row(row.index, row.values)
                lora = self.row_adapters.for_row(row.values)
                text = self.renderer.render(row.values, params)
                ready.append((row, self._bounded(text, params), params, lora))
            except ValueError as exc:
                failures.append(Failure(row, f"{row.where}: {exc}"))
        work = []
        for (row, _, params, lora), encoded in zip(ready, self._encode([text for _, text, _, _ in ready])):
            fitted = (Failure(row, f"{row.where}: the tokenizer failed on the prompt ({encoded})")
                      if isinstance(encoded, str) else self._fit(row, encoded, params))
            if isinstance(fitted, Failure):
                failures.append(fitted)
            else:
                work.append(Work(row, fitted, params, lora=lora))
        return PreparedWindow(order_for_engine(work, lambda w: w.token_ids), failures)

    def collect(self, work: Work, output: RequestOutput) -> Row:
        row = work.row
        if output.error is not None:
            return self.failure(row, f"{row.where}: {output.error}", len(output.prompt_token_ids))
        completions = sorted(output.outputs, key=lambda c: c.index)
        columns = {
            "generated_text": [c.text for c in completions],
            "generated_reasoning": [c.reasoning for c in completions],
            "reasoning_tokens": [c.num_reasoning_tokens for c in completions],
            "finish_reason": [c.finish_reason for c in completions],
            "completion_tokens": [len(c.token_ids) for c in completions],
            "logprobs": [_positions(c.token_ids, c.logprobs) for c in completions],
            "generated_json": [_json_text(c.text, work.params) for c in completions],
            "tool_calls": [_tool_calls(c.tool_calls) for c in completions],
        }
        if not self.list_outputs:
            columns = {name: values[0] for name, values in columns.items()}
        columns["prompt_logprobs"] = _positions(output.prompt_token_ids, output.prompt_logprobs)
        return self._row(row, columns, len(output.prompt_token_ids), None)

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> Row:
        return self._row(row, {}, prompt_tokens, error)

    def _row(self, row: SourceRow, columns: Row, prompt_tokens: int | None, error: str | None) -> Row:
        computed = {**columns, "prompt_tokens": prompt_tokens, "error": error}
        return result_row(row, {name: computed.get(name) for name in self.columns})

    def _bounded(self, text: str, params: SamplingParams) -> str:
        # truncate_prompt_tokens keeps the prompt's end, as left truncation does.
        return bounded(text, self.max_model_len, "left" if params.truncate_prompt_tokens is not None else self.truncate)

    def _encode(self, texts: list[str]) -> list[list[int] | str]:
        return encode_prompts(self.tokenizer, texts, self.renderer.adds_special_tokens)

    def _fit(self, row: SourceRow, token_ids: list[int], params: SamplingParams) -> list[int] | Failure:
        """The prompt cut to leave room for max_tokens when truncation is asked for, else a Failure."""
        token_ids = params.kept_prompt(token_ids, self.max_model_len)
        room = self.max_model_len - params.max_tokens
        if room < 1:
            return Failure(row, f"{row.where}: max_tokens {params.max_tokens} leaves no room for a prompt "
                                f"within max_model_len {self.max_model_len}", len(token_ids))
        if not token_ids:
            return Failure(row, f"{row.where}: the prompt encodes to no tokens", 0)
        fitted = cut_to(token_ids, room, self.truncate)
        if fitted is not None:
            return fitted
        return Failure(row, f"{row.where}: prompt is {len(token_ids)} tokens; with max_tokens {params.max_tokens} "
                            f"it exceeds max_model_len {self.max_model_len} (set truncate to 'left' or 'right' "
                            f"to cut it)", len(token_ids))


def _json_text(text: str, params: SamplingParams) -> str | None:
    """A JSON-constrained output's value as compact JSON text; None for other rows and for outputs cut
    before the value was complete (finish_reason length)."""
    constraint = params.constraint
    if constraint is None or constraint.kind != "json":
        return None
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return None


def _tool_calls(calls: list[ToolCall] | None) -> list[Row] | None:
    """None when the output was not read for calls (the row had no tools, or tool_choice none)."""
    return None if calls is None else [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]


def _positions(token_ids: list[int], records: list[PositionLogprobs | None] | None) -> list[Row | None] | None:
    """Per token: its id and logprob, and the alternatives asked for, best first (None where not scored)."""
    if records is None:
        return None
    return [_position(token_id, candidates) for token_id, candidates in zip(token_ids, records)]


def _position(token_id: int, candidates: PositionLogprobs | None) -> Row | None:
    if candidates is None:
        return None
    chosen = candidates.get(token_id)
    ranked = sorted(candidates.items(), key=lambda item: item[1].rank)
    return {"token_id": token_id, "logprob": chosen.logprob if chosen else None,
            "top_logprobs": [{"token_id": tid, "logprob": lp.logprob} for tid, lp in ranked]}
