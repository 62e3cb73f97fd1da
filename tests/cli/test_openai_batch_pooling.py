"""OpenAI batch files for the pooling endpoints: /v1/embeddings answered as OpenAI's embeddings object (checked
with the openai package's types and its own base64 decoding), /v1/score and /v1/rerank as vLLM's run-batch
answers them; values checked against LLM.embed and LLM.score."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke, one_line_error
from openai._models import construct_type
from openai._types import omit
from openai.lib._parsing._embeddings import parse_embedding_response
from openai.types import CreateEmbeddingResponse, ErrorObject

from bulkinfer import LLM, PoolingParams
from bulkinfer.bench.random_model import make_sentence_transformer
from bulkinfer.openai_batch.requests import parse_line

TEXTS = ["The cat sat on the mat.", "A quick answer", "Seven hundred and two rivers run to the sea at night!"]
QUERY = "Where is the cat?"
FAST = ("--dtype", "float32", "--max-model-len", "64", "--max-num-seqs", "4", "--window-rows", "3", "--shard-rows", "2")


@pytest.fixture(scope="module")
def sentence_model(checkpoint_factory, tmp_path_factory) -> Path:
    return make_sentence_transformer(tmp_path_factory.mktemp("st") / "mean", checkpoint_factory("qwen3"), "mean")


@pytest.fixture(scope="module")
def cross_encoder(checkpoint_factory) -> Path:
    return checkpoint_factory("qwen3", classifier=True, num_labels=1)


def _request(custom_id: str, url: str, **body: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {"model": "my-embedder", **body}}


def _write(path: Path, requests: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(request) + "\n" for request in requests))
    return path


def _run_batch(capsys, batch: Path, model: Path, *flags: str) -> tuple[dict[str, dict], dict[str, dict]]:
    """The answers and the failures, by custom_id."""
    out = batch.with_name("out.jsonl")
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", out, "--model", model, *FAST, *flags)
    assert code == 0, err
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    failures = [json.loads(line) for line in out.with_name("out.errors.jsonl").read_text().splitlines()]
    assert all(line["response"]["status_code"] == 200 for line in answers)
    assert all(line["response"]["status_code"] == 400 for line in failures)
    return {line["custom_id"]: line for line in answers}, {line["custom_id"]: line for line in failures}


def _body(line: dict) -> dict:
    return line["response"]["body"]


def _error(line: dict) -> str:
    return ErrorObject.model_validate(_body(line)["error"]).message


EMBEDDINGS = [
    _request("one", "/v1/embeddings", input=TEXTS[0], user="ignored"),
    _request("list", "/v1/embeddings", input=TEXTS),
    _request("base64", "/v1/embeddings", input=TEXTS[:2], encoding_format="base64"),
    _request("dims", "/v1/embeddings", input=TEXTS[1], dimensions=16),
    _request("empty", "/v1/embeddings", input=""),
    _request("number", "/v1/embeddings", input=5),
    _request("ids", "/v1/embeddings", input=[[1, 2, 3]]),
    _request("too-wide", "/v1/embeddings", input=TEXTS[1], dimensions=65),
    _request("huge", "/v1/embeddings", input=TEXTS[1], dimensions=2**63 - 1),
    _request("too-long", "/v1/embeddings", input=[TEXTS[0], " ".join(["river sea night"] * 40)]),
]


def test_embeddings_lines_are_answered_as_openais_embeddings(capsys, tmp_path: Path, sentence_model: Path) -> None:
    answers, failures = _run_batch(capsys, _write(tmp_path / "batch.jsonl", EMBEDDINGS), sentence_model)
    assert list(answers) == ["one", "list", "base64", "dims"]
    assert list(failures) == ["empty", "number", "ids", "too-wide", "huge", "too-long"]
    llm = LLM(str(sentence_model), dtype="float32", max_model_len=64)
    expected = dict(zip(TEXTS, llm.embed(TEXTS, use_tqdm=False)))
    for custom_id, texts in [("one", TEXTS[:1]), ("list", TEXTS), ("base64", TEXTS[:2])]:
        body = _body(answers[custom_id])
        if custom_id == "base64":  # read as the openai client reads the base64 it asks for by default
            assert all(isinstance(item["embedding"], str) for item in body["data"])
            decoded = parse_embedding_response(construct_type(type_=CreateEmbeddingResponse, value=body),
                                               encoding_format=omit)
            body = decoded.model_dump()
        body = CreateEmbeddingResponse.model_validate(body)
        assert body.model == "my-embedder" and [item.index for item in body.data] == list(range(len(texts)))
        for item, text in zip(body.data, texts):
            assert item.embedding == pytest.approx(expected[text].outputs.embedding, abs=1e-5)
        tokens = sum(len(expected[text].prompt_token_ids) for text in texts)
        assert body.usage.prompt_tokens == body.usage.total_tokens == tokens
    [cut] = llm.embed(TEXTS[1:2], PoolingParams(dimensions=16), use_tqdm=False)
    dims = CreateEmbeddingResponse.model_validate(_body(answers["dims"]))
    assert dims.data[0].embedding == pytest.approx(cut.outputs.embedding, abs=1e-5)
    assert "body.input is an empty string" in _error(failures["empty"])
    assert "body.input must be a non-empty string or a non-empty list of strings" in _error(failures["number"])
    assert "body.input[0] must be a string (token ids are not supported)" in _error(failures["ids"])
    assert "body.dimensions 65 is above the embedding's size (64)" in _error(failures["too-wide"])
    assert f"body.dimensions {2**63 - 1} is above the embedding's size (64)" in _error(failures["huge"])
    assert "exceeds max_model_len 64" in _error(failures["too-long"])


def test_run_format_openai_batch_and_export_answer_embeddings_too(capsys, tmp_path: Path,
                                                                   sentence_model: Path) -> None:
    batch = _write(tmp_path / "batch.jsonl", EMBEDDINGS[:2] + EMBEDDINGS[4:5])
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", sentence_model, "--input", batch,
                          "--output", tmp_path / "job", *FAST)
    assert code == 0, err
    code, _, err = invoke(capsys, "export", tmp_path / "job", tmp_path / "lines.jsonl")
    assert code == 0 and "wrote 3 rows (1 with errors)" in err, err  # the batch's lines, not the job's 5 rows
    lines = [json.loads(line) for line in (tmp_path / "lines.jsonl").read_text().splitlines()]
    assert [(line["custom_id"], line["response"]["status_code"]) for line in lines] == [
        ("one", 200), ("list", 200), ("empty", 400)]
    assert len(CreateEmbeddingResponse.model_validate(_body(lines[1])).data) == len(TEXTS)


def test_score_and_rerank_lines_are_answered_as_vllm_does(capsys, tmp_path: Path, cross_encoder: Path) -> None:
    batch = _write(tmp_path / "batch.jsonl", [
        _request("pair", "/v1/score", text_1=QUERY, text_2=TEXTS[0]),
        _request("one-to-many", "/v1/score", text_1=[QUERY], text_2=TEXTS),
        _request("many", "/v1/score", text_1=[QUERY, "A quick question"], text_2=TEXTS[:2]),
        _request("rerank", "/v1/rerank", query=QUERY, documents=TEXTS),
        _request("top", "/v1/rerank", query=QUERY, documents=TEXTS, top_n=2),
        _request("all", "/v1/rerank", query=QUERY, documents=TEXTS, top_n=2**80),
        _request("mismatch", "/v1/score", text_1=[QUERY, QUERY], text_2=TEXTS),
        _request("no-documents", "/v1/rerank", query=QUERY, documents=[]),
        _request("empty-document", "/v1/rerank", query=QUERY, documents=["x", ""]),
    ])
    answers, failures = _run_batch(capsys, batch, cross_encoder)
    llm = LLM(str(cross_encoder), dtype="float32", max_model_len=64)

    def scored(queries: list[str], documents: list[str]) -> tuple[list[float], int]:
        outputs = llm.score(queries, documents, use_tqdm=False)
        return [o.outputs.score for o in outputs], sum(len(o.prompt_token_ids) for o in outputs)

    for custom_id, queries, documents in [("pair", [QUERY], TEXTS[:1]), ("one-to-many", [QUERY] * 3, TEXTS),
                                          ("many", [QUERY, "A quick question"], TEXTS[:2])]:
        body = _body(answers[custom_id])
        scores, tokens = scored(queries, documents)
        assert body["object"] == "list" and body["model"] == "my-embedder" and body["id"].startswith("score-")
        assert [(item["index"], item["object"]) for item in body["data"]] == [(i, "score") for i in range(len(scores))]
        assert [item["score"] for item in body["data"]] == pytest.approx(scores, abs=1e-5)
        assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}
    scores, tokens = scored([QUERY] * 3, TEXTS)
    ranked = sorted(range(3), key=lambda i: -scores[i])
    for custom_id, kept in [("rerank", 3), ("top", 2), ("all", 3)]:
        body = _body(answers[custom_id])
        assert body["id"].startswith("rerank-") and body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
        assert [result["index"] for result in body["results"]] == ranked[:kept]
        assert [result["document"]["text"] for result in body["results"]] == [TEXTS[i] for i in ranked[:kept]]
        assert [r["relevance_score"] for r in body["results"]] == pytest.approx([scores[i] for i in ranked[:kept]],
                                                                                abs=1e-5)
    assert "body.text_1 has 2 texts and body.text_2 3; they pair 1:1, 1:N or N:N" in _error(failures["mismatch"])
    assert "body.documents must be a non-empty string or a non-empty list" in _error(failures["no-documents"])
    assert "body.documents[1] is an empty string" in _error(failures["empty-document"])


def test_a_file_mixing_tasks_is_refused_in_one_line(capsys, tmp_path: Path, sentence_model: Path) -> None:
    batch = _write(tmp_path / "batch.jsonl", [
        {"custom_id": "broken"},
        _request("chat", "/v1/chat/completions", messages=[{"role": "user", "content": "hi"}]),
        _request("embed", "/v1/embeddings", input="x"),
    ])
    message = "line 3: /v1/embeddings needs task embed, but the lines before it need task generate; one batch file"
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "out.jsonl", "--model", sentence_model)
    assert message in one_line_error(code, err)
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", sentence_model, "--input", batch,
                          "--output", tmp_path / "job")
    assert message in one_line_error(code, err)
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "job" / "input-table.jsonl").exists()


def test_the_task_follows_from_the_url(capsys, tmp_path: Path, sentence_model: Path) -> None:
    batch = _write(tmp_path / "batch.jsonl", EMBEDDINGS[:1])
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", sentence_model, "--input", batch,
                          "--output", tmp_path / "job", "--task", "generate")
    assert "drop --task" in one_line_error(code, err)


@pytest.mark.parametrize(("url", "body", "rows"), [
    ("/v1/embeddings", {"input": ["a", "b"]}, [{"prompt": "a"}, {"prompt": "b"}]),
    ("/v1/score", {"text_1": "q", "text_2": ["a", "b"]}, [{"query": "q", "document": "a"},
                                                          {"query": "q", "document": "b"}]),
    ("/v1/score", {"text_1": ["q", "r"], "text_2": ["a", "b"]}, [{"query": "q", "document": "a"},
                                                                 {"query": "r", "document": "b"}]),
    ("/v1/rerank", {"query": "q", "documents": ["a"], "top_n": 1}, [{"query": "q", "document": "a", "body_top_n": 1}]),
    ("/v1/rerank", {"query": "q", "documents": "a"}, [{"query": "q", "document": "a", "body_top_n": 1}]),
    ("/v1/rerank", {"query": "q", "documents": ["a", "b"], "top_n": -1}, [{"body_top_n": 2}, {"body_top_n": 2}]),
])
def test_a_pooling_line_is_a_row_per_input(url: str, body: dict, rows: list[dict]) -> None:
    parsed = parse_line(json.dumps(_request("x", url, **body)).encode(), 3)
    assert parsed.task == ("embed" if url == "/v1/embeddings" else "rerank")
    assert [{key: row[key] for key in expected} for row, expected in zip(parsed.rows, rows)] == rows
    assert len(parsed.rows) == len(rows)
    assert all((row["custom_id"], row["batch_line"], row["batch_items"]) == ("x", 3, len(rows)) for row in parsed.rows)


@pytest.mark.parametrize(("body", "message"), [
    ({"input": "a", "dimensions": 0}, "body.dimensions must be an integer in [1, 2**63 - 1], got 0"),
    ({"input": "a", "dimensions": True}, "body.dimensions must be an integer in [1, 2**63 - 1], got True"),
    ({"input": "a", "dimensions": 2**63}, f"body.dimensions must be an integer in [1, 2**63 - 1], got {2**63}"),
    ({"input": "a", "encoding_format": "int8"}, "body.encoding_format must be one of float, base64, got 'int8'"),
    ({"input": []}, "body.input must be a non-empty string or a non-empty list of strings"),
    ({"input": ["a", None]}, "body.input[1] must be a string (got NoneType)"),
])
def test_a_broken_embeddings_body_is_its_lines_error(body: dict, message: str) -> None:
    parsed = parse_line(json.dumps(_request("x", "/v1/embeddings", **body)).encode(), 3)
    assert parsed.task == "embed" and [row["batch_error"] for row in parsed.rows] == [f"line 3: {message}"]


def test_a_partial_export_leaves_out_a_line_it_has_only_some_rows_of(capsys, tmp_path: Path,
                                                                      sentence_model: Path) -> None:
    # Rows 0 | 1 2 | 3: shard 0 of 2 runs rows 0 and 1, so it finishes the first line and half of the second.
    batch = _write(tmp_path / "batch.jsonl", [_request("a", "/v1/embeddings", input=TEXTS[0]),
                                              _request("b", "/v1/embeddings", input=TEXTS[1:]),
                                              _request("c", "/v1/embeddings", input=TEXTS[0])])
    run = ("run", "--format", "openai-batch", "--model", sentence_model, "--input", batch, "--output", tmp_path / "job",
           *FAST, "--num-shards", "2")
    exported = []
    for shard, partial in [("0", ("--partial",)), ("1", ())]:
        code, _, err = invoke(capsys, *run, "--shard", shard)
        assert code == 0, err
        code, _, err = invoke(capsys, "export", tmp_path / "job", tmp_path / "lines.jsonl", *partial)
        assert code == 0, err
        lines = [json.loads(line) for line in (tmp_path / "lines.jsonl").read_text().splitlines()]
        exported.append([(line["custom_id"], len(_body(line)["data"])) for line in lines])
    assert exported == [[("a", 1)], [("a", 1), ("b", 2), ("c", 1)]]


def test_a_url_that_is_not_a_string_is_its_lines_error() -> None:
    parsed = parse_line(json.dumps({**_request("x", "/v1/embeddings", input="a"), "url": ["/v1/embeddings"]}).encode(),
                        2)
    assert parsed.task is None and "line 2: unsupported url ['/v1/embeddings']" in parsed.rows[0]["batch_error"]
