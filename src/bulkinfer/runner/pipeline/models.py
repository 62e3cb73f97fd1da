"""The one model a pipeline holds at a time: kept loaded while consecutive stages run the same model
with the same engine settings, and released, memory and all, before a stage with another loads its own.

Releasing drops the engine (its weights and KV pool), collects the garbage, empties PyTorch's CUDA
cache on a GPU, and on the CPU hands the freed heap back to the kernel (glibc keeps it otherwise, see
engine/cpu_memory.py), so that a pipeline of two large models fits where each fits alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
from typing import TYPE_CHECKING, ContextManager

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.job import LocalExecutor, load_llm

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM


class SharedModel(LocalExecutor):
    """A job executor whose engine outlives the job, for the next stage that runs the same model."""

    def __init__(self) -> None:
        self._llm: LLM | None = None
        self._key: str | None = None
        self.loads = 0  # how many times a model was loaded: a test's way to see reuse

    def engine(self, config: JobConfig) -> ContextManager[LLM]:
        key = _engine_key(config)
        if self._llm is None or key != self._key:
            self.release()
            self._llm, self._key = load_llm(config), key
            self.loads += 1
        return contextlib.nullcontext(self._llm)

    def release(self) -> None:
        """Drop the loaded model, if any, and give its memory back."""
        if self._llm is None:
            return
        self._llm.close()
        self._llm = self._key = None
        release_memory()


def release_memory() -> None:
    from bulkinfer.engine.cpu_memory import release_freed_memory
    import torch  # loaded already: a model was

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    release_freed_memory()


def _engine_key(config: JobConfig) -> str:
    return json.dumps([config.model, dataclasses.asdict(config.engine)], sort_keys=True, default=str)
