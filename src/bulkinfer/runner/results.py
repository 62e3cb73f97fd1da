"""Build output rows: the input columns, then the generation (or the error) for that row."""

from __future__ import annotations

from typing import Any

from bulkinfer.outputs import CompletionOutput, RequestOutput
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prepare import Work
from bulkinfer.runner.rows import ROW_INDEX, SourceRow


class ResultBuilder:
    def __init__(self, config: JobConfig) -> None:
        # With n > 1 possible, generation columns hold lists, one entry per sample, on every row.
        self.list_outputs = config.list_outputs
        self.logprobs = config.wants_logprobs

    def success(self, row: SourceRow, output: RequestOutput) -> dict[str, Any]:
        completions = sorted(output.outputs, key=lambda c: c.index)
        columns = {
            "generated_text": [c.text for c in completions],
            "finish_reason": [c.finish_reason for c in completions],
            "completion_tokens": [len(c.token_ids) for c in completions],
        }
        if self.logprobs:
            columns["logprobs"] = [_logprobs_of(c) for c in completions]
        if not self.list_outputs:
            columns = {name: values[0] for name, values in columns.items()}
        return self._row(row, columns, prompt_tokens=len(output.prompt_token_ids), error=None)

    def collect(self, work: Work, output: RequestOutput) -> dict[str, Any] | None:
        """The output row once every request of the row is back; a generation row has just one."""
        return self.finished(work.row, output)

    def finished(self, row: SourceRow, output: RequestOutput) -> dict[str, Any]:
        """The output row of a request the engine has finished, whether it succeeded or failed."""
        if output.error is not None:
            return self.failure(row, f"{row.where}: {output.error}", len(output.prompt_token_ids))
        return self.success(row, output)

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> dict[str, Any]:
        columns = {"generated_text": None, "finish_reason": None, "completion_tokens": None}
        if self.logprobs:
            columns["logprobs"] = None
        return self._row(row, columns, prompt_tokens=prompt_tokens, error=error)

    def _row(self, row: SourceRow, columns: dict[str, Any], prompt_tokens: int | None,
             error: str | None) -> dict[str, Any]:
        result = {ROW_INDEX: row.index, **(row.values or {})}
        result["generated_text"] = columns["generated_text"]
        result["finish_reason"] = columns["finish_reason"]
        result["prompt_tokens"] = prompt_tokens
        result["completion_tokens"] = columns["completion_tokens"]
        result["error"] = error
        if self.logprobs:
            result["logprobs"] = columns["logprobs"]
        return result


def _logprobs_of(completion: CompletionOutput) -> list[dict[str, Any]] | None:
    """Per generated token: its id and logprob, and the alternatives asked for, best first."""
    if completion.logprobs is None:
        return None
    positions = []
    for token_id, candidates in zip(completion.token_ids, completion.logprobs):
        chosen = candidates.get(token_id)
        ranked = sorted(candidates.items(), key=lambda item: item[1].rank)
        positions.append({
            "token_id": token_id,
            "logprob": chosen.logprob if chosen else None,
            "top_logprobs": [{"token_id": tid, "logprob": lp.logprob} for tid, lp in ranked],
        })
    return positions
