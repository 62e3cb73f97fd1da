"""Settings for one pooling request (embed, classify, reward, score), with vLLM's and OpenAI's names; declared
once here, as SamplingParams declares the sampling ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bulkinfer.settings import setting


@dataclass(frozen=True)
class PoolingParams:
    """What a pooling request's output looks like. Whether the model can serve it (a ``dimensions`` above its
    hidden size) is the engine's to say, as that request's error."""

    HELP_PANEL: ClassVar[str] = "Output"

    normalize: bool = setting(True, "Scale each embedding to unit length (after dimensions cuts it).")
    dimensions: int | None = setting(None, "Keep an embedding's first N values (Matryoshka truncation, OpenAI's "
                                           "name); above the model's hidden size is that request's error "
                                           "(default: all of them).")

    def __post_init__(self) -> None:
        if isinstance(self.dimensions, bool) or (self.dimensions is not None and self.dimensions < 1):
            raise ValueError(f"dimensions must be >= 1, got {self.dimensions}")
