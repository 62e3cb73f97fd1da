"""Pooling under tensor parallelism on the CPU: two gloo ranks embed and classify as one process does."""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM

pytestmark = pytest.mark.slow  # spawns rank processes with a process group each

PROMPTS = [[5, 6, 7], list(range(10, 40)), list(range(50, 67))]
ENGINE = {"dtype": "float32", "max_model_len": 64, "max_num_batched_tokens": 16, "block_size": 8}


def _pooled(path, tensor_parallel_size: int, task: str, **options) -> list[torch.Tensor]:
    with LLM(str(path), tensor_parallel_size=tensor_parallel_size, **ENGINE, **options) as llm:
        if task == "embed":
            return [torch.tensor(o.outputs.embedding) for o in llm.embed(PROMPTS, use_tqdm=False)]
        return [o.outputs.data for o in llm.reward(PROMPTS, use_tqdm=False)]


def test_two_ranks_embed_and_classify_as_one(checkpoint_factory):
    embedder, classifier = checkpoint_factory("qwen3"), checkpoint_factory("llama", classifier=True, num_labels=3)
    for one, two in zip(_pooled(embedder, 1, "embed", pooling="mean"), _pooled(embedder, 2, "embed", pooling="mean")):
        torch.testing.assert_close(two, one, atol=1e-4, rtol=0)
    for one, two in zip(_pooled(classifier, 1, "reward"), _pooled(classifier, 2, "reward")):
        torch.testing.assert_close(two, one, atol=1e-4, rtol=0)


def test_a_reranker_needs_one_rank(checkpoint_factory):
    with LLM(str(checkpoint_factory("llama")), tensor_parallel_size=2, classifier_from_token=["a", "Ġthe"],
             **ENGINE) as llm:
        assert llm.supported_tasks == ("generate", "embed")
        llm.add_pooling_request("pair", [5, 6, 7], "score")
        [output] = llm.step()
        assert output.error.startswith("this model cannot score (set classifier_from_token")
