"""Pick the preparer and result builder for the job's task."""

from __future__ import annotations

from typing import Any

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prepare import Preparer
from bulkinfer.runner.results import ResultBuilder
from bulkinfer.runner.score_prepare import ScorePreparer
from bulkinfer.runner.score_results import ScoreResults


def make_preparer(config: JobConfig, tokenizer: Any, max_model_len: int) -> Preparer | ScorePreparer:
    if config.task == "generate":
        return Preparer(config, tokenizer, max_model_len)
    return ScorePreparer(config, tokenizer, max_model_len)


def make_results(config: JobConfig) -> ResultBuilder | ScoreResults:
    return ResultBuilder(config) if config.task == "generate" else ScoreResults(config)
