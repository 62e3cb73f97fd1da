"""Building result rows: the input columns, then what the task computed for the row, or its error.

Each task has a ResultRows: `collect` takes the engine's output for each request and gives the
row once every request of that row is back; `failure` gives the row of one that could not run.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from bulkinfer.engine.scoring import Loglikelihood, loglikelihood_of
from bulkinfer.outputs import PositionLogprobs, RequestOutput, ToolCall
from bulkinfer.runner.columns import OPTIONAL_COLUMNS, REASONING_COLUMNS, ROW_INDEX, TASK_COLUMNS, result_columns
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.requests import Work
from bulkinfer.sampling_params import SamplingParams

Row = dict[str, Any]


class ResultRows(Protocol):
    def collect(self, work: Work, output: RequestOutput) -> Row | None:
        """The output row once every request of the row is back; None while some are still out."""

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> Row:
        """The output row of a row that could not run."""


class GenerateResults:
    """generate: generated_text, finish_reason, completion_tokens (lists when n > 1), logprobs if asked; with a
    reasoning parser (``reasons``), the reasoning and its token count apart from the answer in generated_text."""

    def __init__(self, config: JobConfig, reasons: bool = False) -> None:
        # With n > 1 possible, generation columns hold lists, one entry per sample, on every row.
        self.list_outputs = config.list_outputs
        self.optional = [name for name in ("logprobs", "prompt_logprobs") if config.wants(name)]
        self.optional += ["generated_json"] if config.json_outputs else []
        self.optional += list(REASONING_COLUMNS) if reasons else []
        self.optional += ["tool_calls"] if config.tool_outputs else []

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
        wanted = [name for name in result_columns("generate") if name not in OPTIONAL_COLUMNS or name in self.optional]
        return {ROW_INDEX: row.index, **(row.values or {}), **{name: computed.get(name) for name in wanted}}


class ScoreResults:
    """score: logprob and is_greedy of the continuation; choice: every choice's score and the best."""

    def __init__(self, config: JobConfig) -> None:
        self.columns = TASK_COLUMNS[config.task]
        # row index -> the (request, output) pairs back so far; rows still in flight are redone on resume.
        self.waiting: dict[int, list[tuple[Work, RequestOutput]]] = {}

    def collect(self, work: Work, output: RequestOutput) -> Row | None:
        back = self.waiting.setdefault(work.row.index, [])
        back.append((work, output))
        if len(back) < work.parts:
            return None
        del self.waiting[work.row.index]
        back.sort(key=lambda pair: pair[0].part)
        prompt_tokens = sum(len(out.prompt_token_ids) for _, out in back)
        error = next((out.error for _, out in back if out.error is not None), None)
        if error is not None:
            return self.failure(work.row, f"{work.row.where}: {error}", prompt_tokens)
        scores = [loglikelihood_of(out.prompt_token_ids[w.score_from:], out.prompt_logprobs[w.score_from:])
                  for w, out in back]
        return self._row(work.row, self._values(scores), prompt_tokens, None)

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> Row:
        return self._row(row, dict.fromkeys(self.columns), prompt_tokens, error)

    def _values(self, scores: list[Loglikelihood]) -> Row:
        if self.columns == TASK_COLUMNS["score"]:
            return {"logprob": scores[0].logprob, "is_greedy": scores[0].is_greedy}
        raw = [score.logprob for score in scores]
        # Normalised by continuation length in tokens, so long choices are not penalised for length alone.
        norm = [score.logprob / len(score.token_logprobs) for score in scores]
        return {"choice_logprobs": raw, "choice_logprobs_norm": norm, "choice": _argmax(raw),
                "choice_norm": _argmax(norm)}

    def _row(self, row: SourceRow, columns: Row, prompt_tokens: int | None, error: str | None) -> Row:
        return {ROW_INDEX: row.index, **(row.values or {}), **columns, "prompt_tokens": prompt_tokens, "error": error}


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


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)
