"""bulkinfer: offline bulk batch inference for large language models.

The engine (and with it torch) is imported on first use of `LLM` (the runner on first use of `Pipeline`),
so that commands which only read files (`bulkinfer --help`, `status`, `export`) start at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.outputs import (
    ClassificationRequestOutput, CompletionOutput, EmbeddingRequestOutput, Logprob, PoolingRequestOutput, RequestOutput,
    ScoringRequestOutput,
)
from bulkinfer.pooling_params import PoolingParams
from bulkinfer.sampling_params import SamplingParams

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM
    from bulkinfer.runner.pipeline import Pipeline, Stage

__all__ = ["LLM", "LoRARequest", "Pipeline", "Stage", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob",
           "PoolingParams",
           "PoolingRequestOutput", "EmbeddingRequestOutput", "ClassificationRequestOutput", "ScoringRequestOutput"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from bulkinfer.engine.llm import LLM

        return LLM
    if name in ("Pipeline", "Stage"):  # the runner, with pyarrow, only for a program that runs pipelines
        from bulkinfer.runner import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'bulkinfer' has no attribute {name!r}")
