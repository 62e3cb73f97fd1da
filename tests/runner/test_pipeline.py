"""Pipelines run through the runner: stages resume and rerun by their cache key, the same model is
loaded once for consecutive stages, templates that cannot render give error rows, and best-of-n keeps
the best sample of each prompt."""

import hashlib
import json
from pathlib import Path

import pytest
from runner_files import write_jsonl

from bulkinfer.runner.pipeline import Pipeline

DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "demo-model")
PROBLEMS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(5, 95), (12, 7), (300, 45), (8, 8), (61, 2)]]
GENERATE = dict(name="generate", model=DEMO, max_tokens=5, n=3, temperature=1.0, seed=3, explode=True)
CHECK = dict(name="right", filter="generated_text == answer")


def _ledgers(output: Path) -> dict[str, str]:
    return {d.name: hashlib.sha256((d / "ledger.jsonl").read_bytes()).hexdigest()
            for d in sorted((output / "stages").iterdir())}


def _plus_one(max_tokens: int) -> dict:
    return dict(name="plus_one", model=DEMO, max_tokens=max_tokens, prompt_template="{answer}+1=", temperature=0.0)


def test_editing_the_last_stage_reruns_only_it(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", PROBLEMS)
    first = Pipeline(str(data), tmp_path / "out", [GENERATE, CHECK, _plus_one(5)])
    outcomes = first.run()
    assert [outcome.stage for outcome in outcomes] == ["generate", "right", "plus_one"]
    assert first.models.loads == 1  # one model for both model stages
    rows = first.rows()
    assert rows and all(row["generated_text"] == str(int(row["answer"]) + 1) for row in rows)
    assert all(row["output_index"] in (0, 1, 2) for row in rows)
    before = _ledgers(tmp_path / "out")

    again = Pipeline(str(data), tmp_path / "out", [GENERATE, CHECK, _plus_one(5)])
    outcomes = again.run()
    assert again.models.loads == 0 and _ledgers(tmp_path / "out") == before  # nothing to do, nothing written
    assert again.rows() == rows

    edited = Pipeline(str(data), tmp_path / "out", [GENERATE, CHECK, _plus_one(2)])
    outcomes = edited.run()
    after = _ledgers(tmp_path / "out")
    assert after["01-generate"] == before["01-generate"]
    assert after["03-plus_one"] != before["03-plus_one"]
    assert outcomes[0].job.rows_at_start == outcomes[0].job.rows_total  # resumed with nothing to do
    assert outcomes[2].job.rows_at_start == 0  # redone
    assert [len(row["generated_text"]) <= 2 for row in edited.rows()] == [True] * len(rows)


def test_an_edited_middle_stage_reruns_the_stages_after_it(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", PROBLEMS)
    Pipeline(str(data), tmp_path / "out", [GENERATE, CHECK, _plus_one(5)]).run()
    before = _ledgers(tmp_path / "out")
    edited = Pipeline(str(data), tmp_path / "out", [GENERATE, {**CHECK, "filter": "generated_text != answer"},
                                                    _plus_one(5)])
    outcomes = edited.run()
    assert outcomes[2].job.rows_at_start == 0
    assert _ledgers(tmp_path / "out")["01-generate"] == before["01-generate"]
    assert all(row["generated_text"] != row["answer"] for row in edited.rows("right"))


def test_a_template_with_a_missing_column_gives_that_row_an_error_row(tmp_path: Path) -> None:
    rows = [{"prompt": "1+1=", "answer": "2", "hint": "3"}, {"prompt": "2+2=", "answer": "4"}]
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    stages = [dict(name="use_hint", model=DEMO, max_tokens=4, prompt_template="{hint}+1="),
              dict(name="shown", prompt_template="{answer} / {generated_text} / {nowhere}")]
    pipeline = Pipeline(str(data), tmp_path / "out", stages)
    pipeline.run()
    first = pipeline.rows("use_hint")
    assert [row["error"] for row in first] == [None, "prompt_template: the row has no column 'hint'"]
    assert first[0]["generated_text"] == "4" and first[1]["generated_text"] is None
    shown = pipeline.rows()
    assert len(shown) == 1 and shown[0]["error"] == "prompt_template: the row has no column 'nowhere'"


@pytest.fixture(scope="module")
def reward_model(checkpoint_factory) -> Path:
    return checkpoint_factory("qwen3", classifier=True, num_labels=1)


def test_best_of_n_keeps_the_highest_reward_of_each_prompt(tmp_path: Path, reward_model: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", PROBLEMS)
    score = dict(name="reward", model=str(reward_model), task="reward", prompt_template="{prompt}{generated_text}")
    pipeline = Pipeline(str(data), tmp_path / "out", [GENERATE, score, {"name": "best", "rank_by": "reward",
                                                                        "keep_top": 1}])
    pipeline.run()
    assert pipeline.models.loads == 2
    scored, best = pipeline.rows("reward"), pipeline.rows()
    assert [row["source_row"] for row in best] == list(range(len(PROBLEMS)))
    for row in best:
        candidates = [other["reward"] for other in scored if other["source_row"] == row["source_row"]]
        assert len(candidates) == 3 and row["reward"] == max(candidates)
    assert json.loads((tmp_path / "out" / "pipeline.json").read_text())["stages"][2]["stage"]["keep_top"] == 1


def test_a_template_reads_the_column_its_own_stage_replaces(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", PROBLEMS)
    rewrite = dict(name="rewrite", model=DEMO, max_tokens=5, prompt_template="{generated_text}+1=")
    pipeline = Pipeline(str(data), tmp_path / "out", [dict(name="generate", model=DEMO, max_tokens=5), rewrite])
    pipeline.run()
    assert [row["prompt"] for row in pipeline.rows()] == [f"{row['answer']}+1=" for row in PROBLEMS]
    assert [row["generated_text"] for row in pipeline.rows()] == [str(int(row["answer"]) + 1) for row in PROBLEMS]
    assert "tool_calls" not in pipeline.rows()[0]  # a column no row has a value in is left out, as export does


def test_a_messages_template_is_rendered_with_the_chat_template(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", PROBLEMS)
    chat = dict(name="chat", model=DEMO, max_tokens=5, messages_template=[{"role": "user", "content": "{prompt}"}])
    pipeline = Pipeline(str(data), tmp_path / "out", [chat])
    pipeline.run()
    rows = pipeline.rows()
    assert [row["messages"] for row in rows] == [[{"role": "user", "content": row["prompt"]}] for row in PROBLEMS]
    assert [row["generated_text"] for row in rows] == [row["answer"] for row in PROBLEMS]
