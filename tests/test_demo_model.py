"""The shipped demo model (examples/demo-model) adds numbers, under our engine and transformers alike."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bulkinfer import LLM, SamplingParams

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "demo-model"
DATASET = ROOT / "examples" / "data" / "addition.jsonl"
ROWS = 200
GREEDY = SamplingParams(temperature=0, max_tokens=8)


def load_rows(count: int) -> list[dict]:
    with DATASET.open() as lines:
        return [json.loads(line) for _, line in zip(range(count), lines)]


def load_score_script():
    spec = importlib.util.spec_from_file_location("score_demo", ROOT / "scripts" / "score_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return load_rows(ROWS)


@pytest.fixture(scope="module")
def llm() -> LLM:
    # A small KV pool: the default CPU budget (4 GB) is far more than 200 short rows need.
    return LLM(str(MODEL), device="cpu", num_kv_blocks=512, max_model_len=64)


@pytest.fixture(scope="module")
def generated(llm: LLM, rows: list[dict]) -> list[str]:
    outputs = llm.generate([row["prompt"] for row in rows], GREEDY, use_tqdm=False)
    assert all(output.error is None for output in outputs)
    return [output.outputs[0].text for output in outputs]


def test_checkpoint_is_a_small_llama():
    config = json.loads((MODEL / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert json.loads((MODEL / "generation_config.json").read_text())["eos_token_id"] is not None
    assert sum(f.stat().st_size for f in MODEL.iterdir()) < 8 * 2**20


def test_greedy_accuracy_is_high(rows, generated):
    correct = sum(text == row["answer"] for row, text in zip(rows, generated))
    assert correct / len(rows) >= 0.95, [(r["prompt"], t) for r, t in zip(rows, generated) if t != r["answer"]]


def test_answers_end_with_eos(llm, rows):
    outputs = llm.generate([row["prompt"] for row in rows[:20]], GREEDY, use_tqdm=False)
    assert [o.outputs[0].finish_reason for o in outputs] == ["stop"] * 20


def test_transformers_generate_gives_the_same_answers(rows, generated):
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    for row, ours in zip(rows[:10], generated[:10]):
        ids = tokenizer(row["prompt"], return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, do_sample=False, max_new_tokens=GREEDY.max_tokens)
        assert tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True) == ours


def test_chat_template_feeds_the_model_the_bare_problem(llm):
    messages = [{"role": "system", "content": "You add numbers."}, {"role": "user", "content": "12+34="}]
    rendered = llm.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert llm.tokenizer.encode(rendered, add_special_tokens=False) == llm.tokenizer.encode("12+34=")


def test_score_script_reads_jsonl_and_parquet(tmp_path, rows, generated, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    score_demo = load_score_script()
    results = [{**row, "generated_text": text} for row, text in zip(rows, generated)]
    expected = sum(r["generated_text"] == r["answer"] for r in results)
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    # Joined by id: the results carry no answer column, the dataset supplies it.
    pq.write_table(pa.Table.from_pylist([{"id": r["id"], "generated_text": r["generated_text"]}
                                         for r in results]), tmp_path / "out.parquet")
    for name in ("out.jsonl", "out.parquet"):
        assert score_demo.main([str(tmp_path / name), "--dataset", str(DATASET)]) == 0
        assert f"({expected}/{len(rows)} exact matches)" in capsys.readouterr().out


def test_the_quickstart_in_the_readme_runs(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("12/12 correct;")
