"""Classifiers, reward models, rerankers and pair scores against transformers' own heads, and the requests a
model cannot serve failing alone."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from bulkinfer import LLM, PoolingParams
from bulkinfer.sampling_params import SamplingParams

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
SHARED = list(range(20, 60))  # five full 8-token blocks
PROMPTS = [[7, 8, 9], list(range(100, 131)), SHARED + [61, 62], SHARED + [63, 64, 65, 66]]
# Our test vocabulary has no "no"/"yes" tokens: a reranker's pair of tokens is a setting.
RERANK = {"classifier_from_token": ["a", "Ġthe"], "rerank_template": "Query: {query}\nDocument: {document}\nFit:"}
PAIRS = [("Where is the cat?", "The cat sat on the mat."), ("Where is the cat?", "Seven rivers run to the sea.")]


@pytest.fixture(scope="module")
def classifier(checkpoint_factory):
    return checkpoint_factory("llama", classifier=True, num_labels=3, id2label=LABELS)


@pytest.fixture(scope="module")
def one_label(checkpoint_factory):
    return checkpoint_factory("qwen3", classifier=True, num_labels=1)


def hf_logits(path, prompts: list[list[int]]) -> list[torch.Tensor]:
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return [model(torch.tensor([prompt])).logits[0] for prompt in prompts]


def test_classifier_logits_and_probs_match_transformers_chunked_and_cached(classifier):
    llm = LLM(str(classifier), dtype="float32", max_model_len=64, block_size=8, max_num_batched_tokens=16)
    assert llm.supported_tasks == ("classify", "reward")
    classified = llm.classify(PROMPTS, use_tqdm=False)
    rewarded = llm.reward(PROMPTS, use_tqdm=False)
    assert rewarded[-1].num_cached_tokens == len(SHARED)  # the last-token head may take the cached prefix
    for expected, by_class, raw in zip(hf_logits(classifier, PROMPTS), classified, rewarded):
        torch.testing.assert_close(raw.outputs.data, expected, atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(by_class.outputs.probs), expected.softmax(-1), atol=1e-4, rtol=0)
        assert by_class.outputs.label == LABELS[int(expected.argmax())]


@pytest.mark.parametrize("arch", ["mistral", "qwen2", "qwen3"])
def test_every_dense_family_has_a_native_classification_head(checkpoint_factory, arch):
    path = checkpoint_factory(arch, classifier=True, num_labels=2)
    llm = LLM(str(path), dtype="float32", max_model_len=64, block_size=8)
    for expected, output in zip(hf_logits(path, PROMPTS), llm.reward(PROMPTS, use_tqdm=False)):
        torch.testing.assert_close(output.outputs.data, expected, atol=1e-4, rtol=0)


def test_a_reward_model_returns_its_one_raw_score(one_label):
    llm = LLM(str(one_label), dtype="float32", max_model_len=64, block_size=8)
    assert llm.supported_tasks == ("classify", "reward", "score")
    rewarded, classified = llm.reward(PROMPTS, use_tqdm=False), llm.classify(PROMPTS, use_tqdm=False)
    for expected, output, by_class in zip(hf_logits(one_label, PROMPTS), rewarded, classified):
        assert output.outputs.data.shape == (1,)
        torch.testing.assert_close(output.outputs.data, expected, atol=1e-4, rtol=0)
        assert by_class.outputs.probs == pytest.approx(expected.sigmoid().tolist(), abs=1e-4)  # one label


def test_a_one_label_classifier_scores_pairs_as_a_cross_encoder(one_label):
    llm = LLM(str(one_label), dtype="float32", max_model_len=64, block_size=8)
    tokenizer = AutoTokenizer.from_pretrained(one_label)
    [query] = {query for query, _ in PAIRS}
    scores = llm.score(query, [document for _, document in PAIRS], use_tqdm=False)
    expected = hf_logits(one_label, [tokenizer(q, d)["input_ids"] for q, d in PAIRS])
    for logits, output in zip(expected, scores):
        assert output.outputs.score == pytest.approx(float(logits.sigmoid()[0]), abs=1e-4)


def test_a_reranker_scores_with_its_two_tokens_logits(checkpoint_factory):
    path = checkpoint_factory("llama")
    llm = LLM(str(path), dtype="float32", max_model_len=64, block_size=8, **RERANK)
    assert llm.supported_tasks == ("generate", "embed", "score")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = tokenizer.convert_tokens_to_ids(RERANK["classifier_from_token"])
    for (query, document), output in zip(PAIRS, llm.score([q for q, _ in PAIRS], [d for _, d in PAIRS],
                                                          use_tqdm=False)):
        text = RERANK["rerank_template"].format(query=query, document=document)
        assert output.prompt_token_ids == tokenizer(text)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([output.prompt_token_ids])).logits[0, -1, rows]
        assert output.outputs.score == pytest.approx(float(logits.softmax(-1)[1]), abs=1e-4)


def test_an_embedding_model_scores_pairs_by_cosine_similarity(checkpoint_factory):
    path = checkpoint_factory("qwen3")
    llm = LLM(str(path), dtype="float32", max_model_len=64, block_size=8)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        last = {text: model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0, -1]
                for pair in PAIRS for text in pair}
    for (query, document), output in zip(PAIRS, llm.score(*zip(*PAIRS), use_tqdm=False)):
        expected = torch.nn.functional.cosine_similarity(last[query], last[document], dim=0)
        assert output.outputs.score == pytest.approx(float(expected), abs=1e-4)


def test_a_request_the_model_cannot_serve_fails_alone(checkpoint_factory, classifier):
    llm = LLM(str(checkpoint_factory("llama")), dtype="float32", max_model_len=64, block_size=8)
    llm.add_pooling_request("classify", [5, 6, 7], "classify")
    llm.add_pooling_request("too wide", [5, 6, 7], "embed", PoolingParams(dimensions=65))
    llm.add_pooling_request("too long", list(range(10, 80)), "embed")
    llm.add_pooling_request("fine", [5, 6, 7], "embed", PoolingParams(dimensions=64))
    outputs = {}
    while llm.has_unfinished_requests():
        outputs.update((output.request_id, output) for output in llm.step())
    assert outputs["classify"].error == "this model cannot classify; it serves embed"
    assert outputs["too wide"].error == "dimensions 65 is above the model's hidden size (64)"
    assert "exceeds max_model_len (64)" in outputs["too long"].error
    assert outputs["fine"].error is None and len(outputs["fine"].outputs.embedding) == 64
    with pytest.raises(ValueError, match="task must be one of"):
        llm.add_pooling_request("typo", [5], "embedding")

    no_lm_head = LLM(str(classifier), dtype="float32", max_model_len=64, block_size=8)
    [generated] = no_lm_head.generate([[5, 6, 7]], SamplingParams(max_tokens=2), use_tqdm=False)
    assert generated.error.startswith("this model has no LM head")
    with pytest.raises(ValueError, match="cannot score pairs"):
        no_lm_head.score("q", ["d"], use_tqdm=False)
