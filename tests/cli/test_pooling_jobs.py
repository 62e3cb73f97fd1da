"""The pooling tasks (embed, classify, reward, rerank) as whole jobs through `bulkinfer run` and `bulkinfer
export`, their values checked against the engine's Python API and sentence-transformers' encode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_helpers import exported, invoke, one_line_error
from transformers import AutoTokenizer

from bulkinfer import LLM, PoolingParams
from bulkinfer.bench.random_model import make_sentence_transformer

TEXTS = ["The cat sat on the mat.", "A quick answer", "Seven hundred and two rivers run to the sea at night!",
         "Hello world"]
PAIRS = [("Where is the cat?", "The cat sat on the mat."), ("Where is the cat?", "Seven rivers run to the sea."),
         ("A quick question", "A quick answer")]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
# Our test vocabulary has no "no"/"yes" tokens: a reranker's pair of tokens is a setting.
RERANK = {"classifier_from_token": ["a", "Ġthe"], "rerank_template": "Query: {query}\nDocument: {document}\nFit:"}
RERANK_FLAGS = ("--classifier-from-token", "a", "--classifier-from-token", "Ġthe",
                "--rerank-template", RERANK["rerank_template"])
FAST = ("--dtype", "float32", "--max-model-len", "64", "--max-num-seqs", "4", "--window-rows", "3", "--shard-rows", "2")


@pytest.fixture(scope="module")
def qwen3(checkpoint_factory) -> Path:
    return checkpoint_factory("qwen3")


@pytest.fixture(scope="module")
def sentence_model(qwen3: Path, tmp_path_factory) -> Path:
    return make_sentence_transformer(tmp_path_factory.mktemp("st") / "mean", qwen3, "mean")


@pytest.fixture(scope="module")
def classifier(checkpoint_factory) -> Path:
    return checkpoint_factory("llama", classifier=True, num_labels=3, id2label=LABELS)


@pytest.fixture(scope="module")
def reward_model(checkpoint_factory) -> Path:
    return checkpoint_factory("qwen3", classifier=True, num_labels=1)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _run(capsys, model: Path, data: Path, out: Path, *flags: str) -> list[dict]:
    code, _, err = invoke(capsys, "run", "--model", model, "--input", data, "--output", out, *FAST, *flags)
    assert code == 0, err
    return exported(capsys, out)


def _close(got: list[float], expected: list[float], tolerance: float) -> None:
    assert len(got) == len(expected)
    assert got == pytest.approx(expected, abs=tolerance)


def test_an_embed_job_matches_llm_embed_and_sentence_transformers(capsys, tmp_path: Path,
                                                                   sentence_model: Path) -> None:
    from sentence_transformers import SentenceTransformer

    data = _jsonl(tmp_path / "in.jsonl", [{"prompt": text} for text in TEXTS] + [{"prompt": ""}, {"prompt": None}])
    rows = _run(capsys, sentence_model, data, tmp_path / "out", "--task", "embed")
    expected = LLM(str(sentence_model), dtype="float32", max_model_len=64).embed(TEXTS, use_tqdm=False)
    encoded = SentenceTransformer(str(sentence_model), device="cpu").encode(TEXTS, normalize_embeddings=True)
    for row, output, reference in zip(rows, expected, encoded):
        assert row["error"] is None and row["prompt_tokens"] == len(output.prompt_token_ids)
        _close(row["embedding"], output.outputs.embedding, 1e-5)
        _close(row["embedding"], reference.tolist(), 1e-4)
    assert rows[4]["error"] == "in.jsonl line 5: 'prompt' is empty" and rows[4]["embedding"] is None
    assert rows[5]["error"] == "in.jsonl line 6: 'prompt' is null" and rows[5]["embedding"] is None
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "out.parquet")
    assert code == 0, err
    assert pq.read_schema(tmp_path / "out.parquet").field("embedding").type == pa.list_(pa.float32(), 64)


def test_dimensions_normalize_and_float16_shape_the_embedding(capsys, tmp_path: Path, qwen3: Path) -> None:
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt": TEXTS}), data)
    rows = _run(capsys, qwen3, data, tmp_path / "out", "--task", "embed", "--dimensions", "16", "--no-normalize",
                "--embed-dtype", "float16")
    expected = LLM(str(qwen3), dtype="float32", max_model_len=64).embed(
        TEXTS, PoolingParams(normalize=False, dimensions=16), use_tqdm=False)
    for row, output in zip(rows, expected):
        assert len(row["embedding"]) == 16
        assert row["embedding"] == pytest.approx(output.outputs.embedding, rel=1e-3, abs=1e-3)  # float16
    assert any(abs(sum(v * v for v in row["embedding"]) - 1) > 0.01 for row in rows)  # not normalized
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "out.parquet")
    assert code == 0, err
    assert pq.read_schema(tmp_path / "out.parquet").field("embedding").type == pa.list_(pa.float16(), 16)


def test_an_embed_job_renders_chat_messages_as_generate_does(capsys, tmp_path: Path, qwen3: Path) -> None:
    messages = [[{"role": "user", "content": text}] for text in TEXTS]
    data = _jsonl(tmp_path / "in.jsonl", [{"messages": m} for m in messages])
    rows = _run(capsys, qwen3, data, tmp_path / "out", "--task", "embed", "--messages-column", "messages")
    tokenizer = AutoTokenizer.from_pretrained(qwen3)
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False)
               for m in messages]
    expected = LLM(str(qwen3), dtype="float32", max_model_len=64).embed([{"prompt_token_ids": p} for p in prompts],
                                                                        use_tqdm=False)
    for row, output in zip(rows, expected):
        assert row["prompt_tokens"] == len(output.prompt_token_ids)
        _close(row["embedding"], output.outputs.embedding, 1e-5)


def test_a_classify_job_matches_llm_classify(capsys, tmp_path: Path, classifier: Path) -> None:
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt": TEXTS}), data)
    rows = _run(capsys, classifier, data, tmp_path / "out", "--task", "classify")
    expected = LLM(str(classifier), dtype="float32", max_model_len=64).classify(TEXTS, use_tqdm=False)
    for row, output in zip(rows, expected):
        _close(row["probs"], output.outputs.probs, 1e-5)
        assert row["label"] == output.outputs.label and row["label"] in LABELS.values()
    assert pq.read_schema(next((tmp_path / "out" / "shards").iterdir())).field("probs").type == pa.list_(pa.float32())


def test_a_reward_job_matches_llm_reward(capsys, tmp_path: Path, reward_model: Path) -> None:
    data = _jsonl(tmp_path / "in.jsonl", [{"prompt": text} for text in TEXTS])
    rows = _run(capsys, reward_model, data, tmp_path / "out", "--task", "reward")
    expected = LLM(str(reward_model), dtype="float32", max_model_len=64).reward(TEXTS, use_tqdm=False)
    _close([row["reward"] for row in rows], [float(output.outputs.data[0]) for output in expected], 1e-5)


def test_a_rerank_job_matches_llm_score(capsys, tmp_path: Path, qwen3: Path) -> None:
    data = _jsonl(tmp_path / "in.jsonl", [{"q": q, "d": d} for q, d in PAIRS] + [{"q": "no document"}])
    rows = _run(capsys, qwen3, data, tmp_path / "out", "--task", "rerank", "--query-column", "q",
                "--document-column", "d", *RERANK_FLAGS)
    llm = LLM(str(qwen3), dtype="float32", max_model_len=64, **RERANK)
    expected = llm.score([q for q, _ in PAIRS], [d for _, d in PAIRS], use_tqdm=False)
    _close([row["score"] for row in rows[:3]], [output.outputs.score for output in expected], 1e-5)
    assert rows[3]["score"] is None and rows[3]["error"] == "in.jsonl line 4: no 'd' field"


def test_a_rerank_job_on_a_cross_encoder_matches_llm_score(capsys, tmp_path: Path, reward_model: Path) -> None:
    data = _jsonl(tmp_path / "in.jsonl", [{"query": q, "document": d} for q, d in PAIRS])
    rows = _run(capsys, reward_model, data, tmp_path / "out", "--task", "rerank")
    expected = LLM(str(reward_model), dtype="float32", max_model_len=64).score([q for q, _ in PAIRS], [d for _,
                                                                                                       d in PAIRS],
                                                              use_tqdm=False)
    _close([row["score"] for row in rows], [output.outputs.score for output in expected], 1e-5)


def test_an_embed_job_resumes_only_with_the_same_embedding_settings(capsys, tmp_path: Path, qwen3: Path) -> None:
    data = _jsonl(tmp_path / "in.jsonl", [{"prompt": text} for text in TEXTS])
    _run(capsys, qwen3, data, tmp_path / "out", "--task", "embed")
    code, _, err = invoke(capsys, "run", "--model", qwen3, "--input", data, "--output", tmp_path / "out", *FAST,
                          "--task", "embed", "--dimensions", "16")
    assert "holds a different job (dimensions" in one_line_error(code, err)


@pytest.mark.parametrize(("model", "flags", "message"), [
    ("qwen3", ("--task", "classify"), "task classify: .* cannot run it; it runs generate, score, choice, embed"),
    ("qwen3", ("--task", "rerank"), "set classifier_from_token to make a causal LM a reranker"),
    ("classifier", ("--task", "generate"), "task generate: .* cannot run it; it runs classify, reward"),
    ("classifier", ("--task", "embed"), "task embed: .* cannot run it"),
    ("qwen3", ("--task", "embed", "--dimensions", "65"), "dimensions 65 is above the model's hidden size \\(64\\)"),
    ("qwen3", ("--task", "embed", "--dimensions", "0"), "bad pooling setting: dimensions must be >= 1"),
    ("qwen3", ("--task", "embed", "--embed-dtype", "float64"), "embed_dtype must be one of float32, float16"),
    ("qwen3", ("--task", "rerank", "--truncate", "left", *RERANK_FLAGS), "truncate does not apply to task rerank"),
])
def test_a_job_the_model_cannot_serve_is_refused_in_one_line(capsys, tmp_path: Path, request, model: str,
                                                              flags: tuple[str, ...], message: str) -> None:
    data = _jsonl(tmp_path / "in.jsonl", [{"prompt": "x", "query": "q", "document": "d"}])
    code, _, err = invoke(capsys, "run", "--model", request.getfixturevalue(model), "--input", data,
                          "--output", tmp_path / "out", *flags)
    assert re.search(message, one_line_error(code, err))
    assert not (tmp_path / "out" / "job.json").exists()


def test_float16_embeddings_are_the_same_numbers_in_jsonl_result_files(capsys, tmp_path: Path, qwen3: Path) -> None:
    data = _jsonl(tmp_path / "in.jsonl", [{"prompt": text} for text in TEXTS])
    flags = ("--task", "embed", "--embed-dtype", "float16")
    parquet = _run(capsys, qwen3, data, tmp_path / "parquet", *flags)
    jsonl = _run(capsys, qwen3, data, tmp_path / "jsonl", *flags, "--output-format", "jsonl")
    assert [row["embedding"] for row in jsonl] == [row["embedding"] for row in parquet]


def test_an_over_long_prompt_fails_its_row_unless_truncate_cuts_it(capsys, tmp_path: Path, qwen3: Path) -> None:
    long = " ".join(["river sea night"] * 40)
    data = _jsonl(tmp_path / "in.jsonl", [{"prompt": long}, {"prompt": TEXTS[0]}])
    failed = _run(capsys, qwen3, data, tmp_path / "fail", "--task", "embed")
    assert "exceeds max_model_len 64 (set truncate" in failed[0]["error"] and failed[0]["embedding"] is None
    assert failed[0]["prompt_tokens"] > 64 and failed[1]["error"] is None
    cut = _run(capsys, qwen3, data, tmp_path / "cut", "--task", "embed", "--truncate", "left")
    ids = AutoTokenizer.from_pretrained(qwen3)(long)["input_ids"][-64:]
    [expected] = LLM(str(qwen3), dtype="float32", max_model_len=64).embed([{"prompt_token_ids": ids}], use_tqdm=False)
    assert cut[0]["prompt_tokens"] == 64
    _close(cut[0]["embedding"], expected.outputs.embedding, 1e-5)
