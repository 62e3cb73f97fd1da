"""A job's task, as the loop sees it: how rows become requests, and how outputs become result rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.requests import GenerateRequests, RequestPreparer, ScoreRequests
from bulkinfer.runner.results import GenerateResults, ResultRows, ScoreResults


@dataclass
class Task:
    prepare: RequestPreparer
    results: ResultRows


def make_task(config: JobConfig, tokenizer: Any, max_model_len: int, reasons: bool = False) -> Task:
    """generate, or score and choice (prefill-only requests that score continuations). ``reasons``: whether the
    model has a reasoning parser."""
    if config.task == "generate":
        return Task(GenerateRequests(config, tokenizer, max_model_len), GenerateResults(config, reasons))
    return Task(ScoreRequests(config, tokenizer, max_model_len), ScoreResults(config))
