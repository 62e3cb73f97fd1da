"""Pipelines: several stages (generate, judge, reward, filter, dedup...) over one input, each model stage
a job done exactly once in its own output directory, run one after another in one process.
See docs/pipelines.md."""

from bulkinfer.runner.pipeline.run import Pipeline, StageOutcome
from bulkinfer.runner.pipeline.stage import Stage, StageSettings

__all__ = ["Pipeline", "Stage", "StageOutcome", "StageSettings"]
