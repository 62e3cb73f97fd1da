"""A pooling request: one prompt, one prefill-only sequence, and the output its pooled state becomes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bulkinfer.engine.sequence import Sequence
from bulkinfer.outputs import (
    ClassificationOutput,
    ClassificationRequestOutput,
    EmbeddingOutput,
    EmbeddingRequestOutput,
    PoolingOutput,
    PoolingRequestOutput,
    ScoringOutput,
    ScoringRequestOutput,
)
from bulkinfer.pooling_params import PoolingParams

_OUTPUT_TYPES = {"embed": EmbeddingRequestOutput, "classify": ClassificationRequestOutput,
                 "score": ScoringRequestOutput, "reward": PoolingRequestOutput}


@dataclass
class PoolingRequest:
    request_id: object
    prompt_token_ids: list[int]
    task: str
    params: PoolingParams
    labels: tuple[str, ...] = ()  # a classifier's, to name the likeliest
    seqs: list[Sequence] = field(default_factory=list)
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.error is not None or all(seq.is_finished for seq in self.seqs)

    def output(self) -> PoolingRequestOutput:
        output_type = _OUTPUT_TYPES[self.task]
        if self.error:
            return output_type(self.request_id, None, self.prompt_token_ids, error=self.error)
        [seq] = self.seqs
        return output_type(self.request_id, self._outputs(seq.pooler.result), self.prompt_token_ids,
                           num_cached_tokens=seq.num_cached_tokens)

    def _outputs(self, result: torch.Tensor):
        # result: [hidden] for embed, [num_labels] for the heads, [2] (false, true) for a reranker
        if self.task == "embed":
            embedding = result[:self.params.dimensions]
            if self.params.normalize:
                embedding = torch.nn.functional.normalize(embedding, dim=-1)
            return EmbeddingOutput(embedding.tolist())
        if self.task == "classify":
            probs = result.softmax(-1) if result.numel() > 1 else result.sigmoid()
            return ClassificationOutput(probs.tolist(), self.labels[int(probs.argmax())])
        if self.task == "score":
            return ScoringOutput(float(_pair_score(result)))
        return PoolingOutput(result)


def _pair_score(result: torch.Tensor) -> torch.Tensor:
    """A pair's score from its head's logits: a reranker's (false, true) as the true token's probability between
    the two, a one-label cross-encoder's through a sigmoid."""
    return result.softmax(-1)[1] if result.numel() == 2 else result.sigmoid()[0]
