"""LoRA adapters in jobs: named with --lora NAME=PATH, chosen per row by the lora param column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import exported, invoke, one_line_error
from lora_adapters import make_adapter

from bulkinfer import LLM, LoRARequest, SamplingParams

PROMPTS = ["the cat sat on", "one two three", "a b c d e", "lorem ipsum", "hello there", "zero"]


@pytest.fixture(scope="module")
def adapters(tiny_llama, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("job-adapters")
    return {"sql": make_adapter(tiny_llama, root / "sql", rank=4, seed=5),
            "poem": make_adapter(tiny_llama, root / "poem", rank=8, seed=6, use_rslora=True)}


def _input(tmp_path: Path, rows: list[dict]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _run(capsys, tmp_path: Path, model: Path, rows: list[dict], *flags: str) -> tuple[int, str]:
    code, _, err = invoke(capsys, "run", "--model", model, "--input", _input(tmp_path, rows), "--output",
                          tmp_path / "out", "--max-tokens", "6", "--temperature", "0", "--ignore-eos", "--dtype", "float32",
                          *flags)
    return code, err


def test_each_row_runs_through_the_adapter_it_names(capsys, tmp_path, tiny_llama, adapters):
    choices = ["sql", "poem", "base", None, "sql", "nonesuch"]
    rows = [{"prompt": p, "adapter": a} for p, a in zip(PROMPTS, choices)]
    code, err = _run(capsys, tmp_path, tiny_llama, rows, "--lora", f"sql={adapters['sql']}",
                     "--lora", f"poem={adapters['poem']}", "--param-column", "lora=adapter")
    assert code == 0, err
    results = exported(capsys, tmp_path / "out")
    assert "'nonesuch' is neither the model nor one of the job's adapters (base, poem, sql)" in results[-1]["error"]
    # The job's ids are the names' order: poem 1, sql 2.
    loras = {"sql": LoRARequest("sql", 2, str(adapters["sql"])), "poem": LoRARequest("poem", 1, str(adapters["poem"]))}
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True)
    expected = llm.generate(PROMPTS[:5], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                            use_tqdm=False, lora_request=[loras.get(choice) for choice in choices[:5]])
    assert [row["generated_text"] for row in results[:5]] == [output.outputs[0].text for output in expected]
    assert len({row["generated_text"] for row in results[:3]}) == 3


def test_a_job_files_lora_table_is_the_flags_and_a_changed_adapter_is_a_different_job(capsys, tmp_path, tiny_llama,
                                                                                     adapters):
    job = tmp_path / "job.toml"
    job.write_text(f'lora = {{ sql = "{adapters["sql"]}" }}\nparam_columns = {{ lora = "adapter" }}\n')
    data = _input(tmp_path, [{"prompt": "the cat", "adapter": "sql"}])
    run = ("run", "--model", tiny_llama, "--input", data, "--output", tmp_path / "out", "--max-tokens", "6")
    assert invoke(capsys, *run, job)[0] == 0
    # The same adapter by flags is the same job: it resumes (nothing left to do).
    assert invoke(capsys, *run, "--lora", f"sql={adapters['sql']}", "--param-column", "lora=adapter")[0] == 0
    code, _, err = invoke(capsys, *run, "--lora", f"sql={adapters['poem']}", "--param-column", "lora=adapter")
    assert "lora" in one_line_error(code, err) and "input" not in err


@pytest.mark.parametrize("flags, message", [
    (["--lora", "sql=/no/such/adapter", "--param-column", "lora=adapter"], "no adapter_config.json"),
    (["--lora", "sql=ADAPTER"], "add --param-column lora=COLUMN"),
    (["--param-column", "lora=adapter"], "give them with --lora NAME=PATH"),
    (["--lora", "base=ADAPTER", "--param-column", "lora=adapter"], "means the base model"),
    (["--lora", "sql=ADAPTER", "--param-column", "lora=adapter", "--task", "embed"], "takes no LoRA adapters"),
    (["--lora", "sql=ADAPTER", "--param-column", "lora=adapter", "--max-lora-rank", "2"], "above max_lora_rank"),
    (["--lora", "sql=ADAPTER", "--param-column", "lora=adapter", "--tensor-parallel-size", "2"],
     "without tensor parallelism"),
])
def test_a_job_whose_adapters_cannot_run_is_refused_in_one_line(capsys, tmp_path, tiny_llama, adapters, flags,
                                                                message):
    flags = [flag.replace("ADAPTER", str(adapters["sql"])) for flag in flags]
    code, err = _run(capsys, tmp_path, tiny_llama, [{"prompt": "x", "adapter": "sql"}], *flags)
    assert message in one_line_error(code, err)
    assert not (tmp_path / "out" / "job.json").exists()


def test_an_openai_batch_lines_body_model_chooses_its_adapter(capsys, tmp_path, tiny_llama, adapters):
    """body.model: an adapter's name, the base model's own name, or anything else (that line's error)."""
    models = ["sql", tiny_llama.name, "sql", "gpt-4o-mini"]
    lines = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
              "body": {"model": model, "prompt": PROMPTS[i], "max_tokens": 6, "temperature": 0, "ignore_eos": True}}
             for i, model in enumerate(models)]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, _, err = invoke(capsys, "run-batch", "-i", batch, "-o", tmp_path / "out.jsonl", "--model", tiny_llama,
                          "--lora", f"sql={adapters['sql']}", "--dtype", "float32")
    assert code == 0, err
    answers = {line["custom_id"]: line["response"]["body"] for line in
               map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    failures = [json.loads(line) for line in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert [line["custom_id"] for line in failures] == ["r3"]
    assert "'gpt-4o-mini' is neither the model nor one of" in failures[0]["response"]["body"]["error"]["message"]
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True)
    sql = LoRARequest("sql", 1, str(adapters["sql"]))
    expected = llm.generate(PROMPTS[:3], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
                            use_tqdm=False, lora_request=[sql, None, sql])
    assert [answers[f"r{i}"]["choices"][0]["text"] for i in range(3)] == [o.outputs[0].text for o in expected]


def test_a_score_job_scores_each_row_under_its_adapter(capsys, tmp_path, tiny_llama, adapters):
    rows = [{"context": "the cat", "continuation": " sat on the mat", "adapter": a} for a in ("sql", "base")]
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", _input(tmp_path, rows), "--output",
                          tmp_path / "out", "--task", "score", "--lora", f"sql={adapters['sql']}",
                          "--param-column", "lora=adapter", "--dtype", "float32")
    assert code == 0, err
    results = exported(capsys, tmp_path / "out")
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True)
    pair = [("the cat", " sat on the mat")]
    sql = llm.loglikelihood(pair, lora_request=LoRARequest("sql", 1, str(adapters["sql"])))[0].logprob
    base = llm.loglikelihood(pair)[0].logprob
    assert results[0]["logprob"] == pytest.approx(sql, abs=1e-4)
    assert results[1]["logprob"] == pytest.approx(base, abs=1e-4) and abs(sql - base) > 1e-2



def test_an_adapter_that_cannot_be_read_is_refused_before_a_ray_job_starts(capsys, tmp_path, tiny_llama):
    code, err = _run(capsys, tmp_path, tiny_llama, [{"prompt": "x", "adapter": "sql"}], "--lora", "sql=/no/such/adapter",
                     "--param-column", "lora=adapter", "--executor", "ray")
    assert "no adapter_config.json" in one_line_error(code, err)
    assert not (tmp_path / "out" / "job.json").exists()
