"""bulkinfer: offline bulk batch inference for large language models."""

from bulkinfer.engine.llm import LLM
from bulkinfer.outputs import CompletionOutput, Logprob, RequestOutput
from bulkinfer.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob"]
__version__ = "0.1.0"
