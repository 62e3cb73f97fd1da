"""Build output rows of the score and choice tasks, once every request of a row is back."""

from __future__ import annotations

from typing import Any

from bulkinfer.engine.scoring import Loglikelihood, loglikelihood_of
from bulkinfer.outputs import RequestOutput
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prepare import Work
from bulkinfer.runner.rows import ROW_INDEX, TASK_COLUMNS, SourceRow


class ScoreResults:
    def __init__(self, config: JobConfig) -> None:
        self.columns = TASK_COLUMNS[config.task]
        # row index -> the (request, output) pairs back so far; rows still in flight are redone on resume.
        self.waiting: dict[int, list[tuple[Work, RequestOutput]]] = {}

    def collect(self, work: Work, output: RequestOutput) -> dict[str, Any] | None:
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

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> dict[str, Any]:
        return self._row(row, dict.fromkeys(self.columns), prompt_tokens, error)

    def _values(self, scores: list[Loglikelihood]) -> dict[str, Any]:
        if self.columns == TASK_COLUMNS["score"]:
            return {"logprob": scores[0].logprob, "is_greedy": scores[0].is_greedy}
        raw = [score.logprob for score in scores]
        # Normalised by continuation length in tokens, so long choices are not penalised for length alone.
        norm = [score.logprob / len(score.token_logprobs) for score in scores]
        return {"choice_logprobs": raw, "choice_logprobs_norm": norm, "choice": _argmax(raw), "choice_norm": _argmax(norm)}

    def _row(self, row: SourceRow, columns: dict[str, Any], prompt_tokens: int | None,
             error: str | None) -> dict[str, Any]:
        return {ROW_INDEX: row.index, **(row.values or {}), **columns, "prompt_tokens": prompt_tokens, "error": error}


def _argmax(values: list[float]) -> int:
    return max(range(len(values)), key=values.__getitem__)
