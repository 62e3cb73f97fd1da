"""Embeddings against transformers' hidden states pooled by hand and against sentence-transformers' encode,
through chunked prefill and the prefix cache."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoModel

from bulkinfer import LLM, PoolingParams
from bulkinfer.bench.random_model import make_sentence_transformer
from bulkinfer.sampling_params import SamplingParams

RAW = PoolingParams(normalize=False)
# Lengths across one, two and several 16-token steps; a 40-token shared head is five full 8-token blocks.
SHARED = list(range(20, 60))
PROMPTS = [[7, 8, 9], list(range(100, 131)), SHARED + [61, 62], SHARED + [63, 64, 65, 66], list(range(200, 250))]


@pytest.fixture(scope="module")
def qwen3(checkpoint_factory):
    return checkpoint_factory("qwen3")


@pytest.fixture(scope="module")
def hf_hidden(qwen3):
    model = AutoModel.from_pretrained(qwen3, dtype=torch.float32).eval()

    def hidden(token_ids: list[int]) -> torch.Tensor:  # [len, hidden]: final-normed, as AutoModel gives them
        with torch.no_grad():
            return model(torch.tensor([token_ids])).last_hidden_state[0]

    return hidden


POOLED = {"last": lambda h: h[-1], "mean": lambda h: h.mean(0), "cls": lambda h: h[0]}


def embeddings(llm: LLM, prompts: list[list[int]], params: PoolingParams = RAW) -> list[torch.Tensor]:
    outputs = llm.embed(prompts, params, use_tqdm=False)
    assert all(output.error is None for output in outputs)
    return [torch.tensor(output.outputs.embedding) for output in outputs]


@pytest.mark.parametrize("method", ["last", "mean", "cls"])
def test_pooled_hidden_states_match_transformers_across_chunks(qwen3, hf_hidden, method):
    llm = LLM(str(qwen3), dtype="float32", pooling=method, max_model_len=128, block_size=8, max_num_batched_tokens=16)
    for prompt, embedding in zip(PROMPTS, embeddings(llm, PROMPTS)):
        torch.testing.assert_close(embedding, POOLED[method](hf_hidden(prompt)), atol=1e-4, rtol=0)


def test_transformers_model_code_embeds_too(checkpoint_factory):
    path = checkpoint_factory("llama")
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    llm = LLM(str(path), dtype="float32", model_impl="transformers", pooling="mean", max_model_len=128, block_size=8,
              max_num_batched_tokens=16)
    for prompt, embedding in zip(PROMPTS, embeddings(llm, PROMPTS)):
        with torch.no_grad():
            expected = model(torch.tensor([prompt])).last_hidden_state[0].mean(0)
        torch.testing.assert_close(embedding, expected, atol=1e-4, rtol=0)


def test_last_token_pooling_takes_prefix_cache_hits(qwen3, hf_hidden):
    llm = LLM(str(qwen3), dtype="float32", pooling="last", max_model_len=128, block_size=8)
    embeddings(llm, [SHARED + [70]])
    [output] = llm.embed([SHARED + [71, 72]], RAW, use_tqdm=False)
    assert output.num_cached_tokens == len(SHARED)
    torch.testing.assert_close(torch.tensor(output.outputs.embedding), hf_hidden(SHARED + [71, 72])[-1],
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("method", ["mean", "cls"])
def test_mean_and_cls_pooling_compute_every_token(qwen3, hf_hidden, method):
    llm = LLM(str(qwen3), dtype="float32", pooling=method, max_model_len=128, block_size=8)
    embeddings(llm, [SHARED + [70]])
    [output] = llm.embed([SHARED + [71, 72]], RAW, use_tqdm=False)
    assert output.num_cached_tokens == 0
    torch.testing.assert_close(torch.tensor(output.outputs.embedding),
                               POOLED[method](hf_hidden(SHARED + [71, 72])), atol=1e-4, rtol=0)


def test_a_preempted_mean_pooling_request_starts_its_sum_again(qwen3, hf_hidden):
    # Five 8-token blocks: the generating request, admitted first, grows into the blocks the pooling request's
    # later chunks need, so the pooling request is preempted part-way and computed again from its start.
    llm = LLM(str(qwen3), dtype="float32", pooling="mean", max_model_len=40, block_size=8, num_kv_blocks=5,
              max_num_batched_tokens=8)
    llm.add_request("generate", list(range(100, 108)), SamplingParams(max_tokens=30, ignore_eos=True))
    prompt = list(range(300, 330))
    llm.add_pooling_request("embed", prompt, "embed", RAW)
    outputs = {}
    while llm.has_unfinished_requests():
        outputs.update((output.request_id, output) for output in llm.step())
    assert llm.stats.preemptions > 0
    torch.testing.assert_close(torch.tensor(outputs["embed"].outputs.embedding), hf_hidden(prompt).mean(0),
                               atol=1e-4, rtol=0)


TEXTS = ["The cat sat on the mat.", "A quick answer", "Seven hundred and two rivers run to the sea at night!"]


@pytest.mark.parametrize("mode", ["mean", "lasttoken"])
def test_embeddings_match_sentence_transformers(qwen3, tmp_path, mode):
    from sentence_transformers import SentenceTransformer

    path = make_sentence_transformer(tmp_path / mode, qwen3, mode)
    expected = SentenceTransformer(str(path), device="cpu").encode(TEXTS, convert_to_tensor=True,
                                                                   normalize_embeddings=True)
    llm = LLM(str(path), dtype="float32", max_model_len=64, block_size=8)  # pooling auto: the model's Pooling config
    torch.testing.assert_close(torch.stack(embeddings(llm, TEXTS, PoolingParams())), expected, atol=1e-4, rtol=0)


def test_dimensions_cut_before_normalizing_as_sentence_transformers(qwen3, tmp_path):
    from sentence_transformers import SentenceTransformer

    path = make_sentence_transformer(tmp_path / "st", qwen3, "mean")
    expected = SentenceTransformer(str(path), device="cpu").encode(TEXTS, convert_to_tensor=True, truncate_dim=16,
                                                                   normalize_embeddings=True)
    llm = LLM(str(path), dtype="float32", max_model_len=64, block_size=8)
    got = torch.stack(embeddings(llm, TEXTS, PoolingParams(dimensions=16)))
    assert got.shape == (3, 16)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_pooling_modes_bulkinfer_does_not_run_are_refused(qwen3, tmp_path):
    from bulkinfer.models.refusal import UnsupportedModelError

    path = make_sentence_transformer(tmp_path / "max", qwen3, "max")
    with pytest.raises(UnsupportedModelError, match="pooling 'max' is not supported"):
        LLM(str(path), dtype="float32", max_model_len=64)
    LLM(str(path), dtype="float32", max_model_len=64, pooling="mean")  # the setting overrides the model's config

    bidirectional = tmp_path / "bidirectional"
    shutil.copytree(qwen3, bidirectional)
    config = json.loads((bidirectional / "config.json").read_text())
    (bidirectional / "config.json").write_text(json.dumps({**config, "is_causal": False}))
    with pytest.raises(UnsupportedModelError, match="bidirectional attention"):
        LLM(str(bidirectional), dtype="float32", max_model_len=64)
