"""Whole jobs against the real engine and the tiny checkpoint, in this process."""

import os
import signal
import threading
from pathlib import Path

import pytest
from runner_files import prompts, read_results, write_jsonl, write_parquet

from bulkinfer import LLM, SamplingParams
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.loop import Snapshot
from bulkinfer.runner.status import job_status

FAST = dict(dtype="float32", max_tokens=4, temperature=0.0, max_num_seqs=8, window_rows=8, shard_rows=6, commit_seconds=0.5)


def _run(tmp_path: Path, model: Path, data: Path, name: str = "out", **settings):
    config = JobConfig.from_settings(model=str(model), input=[str(data)], output=str(tmp_path / name),
                                     **{**FAST, **settings})
    return config, run_job(config)


def _export(tmp_path: Path, name: str = "out") -> list[dict]:
    destination = tmp_path / f"{name}.parquet"
    export_job(tmp_path / name, destination)
    return read_results(destination)


def test_every_row_gets_exactly_one_result_or_error_in_input_order(tmp_path: Path, tiny_llama: Path) -> None:
    good = prompts(10)
    data = write_jsonl(tmp_path / "in.jsonl", good[:5] + [
        "{broken", "[1]", b'{"prompt": "\xff"}', {"text": "no prompt"}, {"prompt": 7}, {"prompt": ""},
        {"prompt": "word " * 200},
    ] + good[5:], blank_every=4)
    config, outcome = _run(tmp_path, tiny_llama, data, max_model_len=128)
    assert (outcome.rows_total, outcome.rows_done, outcome.rows_failed, outcome.complete) == (17, 17, 7, True)
    rows = _export(tmp_path)
    assert [row["row_index"] for row in rows] == list(range(17))
    errors = [row["error"] for row in rows[5:12]]
    assert errors[0].startswith("in.jsonl line 7: not valid JSON")
    assert errors[1] == "in.jsonl line 8: expected a JSON object, got an array"
    assert errors[2].startswith("in.jsonl line 9: not valid UTF-8")
    assert errors[3:6] == ["in.jsonl line 11: no 'prompt' field", "in.jsonl line 12: 'prompt' must be a string, got int",
                           "in.jsonl line 13: 'prompt' is empty"]
    assert "exceeds max_model_len 128" in errors[6]
    ok = rows[:5] + rows[12:]
    assert all(row["error"] is None and row["finish_reason"] in ("stop", "length") for row in ok)
    assert [row["prompt"] for row in ok] == [row["prompt"] for row in good]
    assert [row["k"] for row in ok] == list(range(10))
    # The runner's results are the engine's own, whatever the batching.
    llm = LLM(str(tiny_llama), dtype="float32", max_num_seqs=8)
    expected = llm.generate([row["prompt"] for row in good], SamplingParams(max_tokens=4, temperature=0.0),
                            use_tqdm=False)
    assert [row["generated_text"] for row in ok] == [output.outputs[0].text for output in expected]
    assert [row["prompt_tokens"] for row in ok] == [len(output.prompt_token_ids) for output in expected]
    assert [row["completion_tokens"] for row in ok] == [len(output.outputs[0].token_ids) for output in expected]
    assert job_status(tmp_path / "out").state == "complete"


def test_a_complete_job_reruns_as_a_no_op(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", prompts(3))
    _run(tmp_path, tiny_llama, data)
    ledger = (tmp_path / "out" / "ledger.jsonl").read_bytes()
    _, outcome = _run(tmp_path, tiny_llama, data)
    assert outcome.complete and outcome.rows_at_start == 3
    assert (tmp_path / "out" / "ledger.jsonl").read_bytes() == ledger


class _InterruptAfter:
    """A reporter that sends this process SIGINT once `rows` rows are done: Ctrl-C mid-job."""

    def __init__(self, rows: int) -> None:
        self.rows, self.sent = rows, False

    def update(self, snapshot: Snapshot) -> None:
        if snapshot.rows_done >= self.rows and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_commits_finished_rows_and_a_rerun_finishes_identically(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", prompts(30))
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "out"), **FAST)
    stopped = run_job(config, reporter=_InterruptAfter(8))
    assert stopped.stopped_by == signal.SIGINT and not stopped.complete
    assert stopped.rows_done >= 8 and job_status(tmp_path / "out").state == "interrupted"
    resumed = run_job(config)
    assert resumed.complete and resumed.rows_at_start == stopped.rows_done
    _run(tmp_path, tiny_llama, data, name="baseline")
    assert _export(tmp_path) == _export(tmp_path, "baseline")


def test_parquet_input_with_samples_logprobs_and_jsonl_shards(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_parquet(tmp_path / "in.parquet", prompts(5))
    _, outcome = _run(tmp_path, tiny_llama, data, n=2, temperature=1.0, seed=3, logprobs=2, output_format="jsonl")
    assert outcome.complete and outcome.rows_failed == 0
    assert all(path.suffix == ".jsonl" for path in (tmp_path / "out" / "shards").iterdir())
    rows = _export(tmp_path)
    for row in rows:
        assert len(row["generated_text"]) == 2 and len(row["finish_reason"]) == 2
        assert [len(positions) for positions in row["logprobs"]] == row["completion_tokens"]
        first = row["logprobs"][0][0]
        assert len(first["top_logprobs"]) >= 2 and first["logprob"] <= 0
    # Seeds derive from the row position, so the same job gives the same samples.
    _run(tmp_path, tiny_llama, data, name="again", n=2, temperature=1.0, seed=3, logprobs=2, output_format="jsonl")
    assert _export(tmp_path, "again") == rows


def test_chat_messages_with_a_system_prompt(tmp_path: Path, tiny_llama: Path) -> None:
    chats = [{"chat": [{"role": "user", "content": f"Question {i}?"}]} for i in range(3)]
    data = write_jsonl(tmp_path / "in.jsonl", chats + [{"chat": "not a list"}])
    _, outcome = _run(tmp_path, tiny_llama, data, messages_column="chat", system_prompt="Be brief.")
    assert (outcome.rows_done, outcome.rows_failed) == (4, 1)
    rows = _export(tmp_path)
    assert all(row["generated_text"] is not None for row in rows[:3])
    assert rows[3]["error"].startswith("in.jsonl line 4: 'chat' must be a non-empty list")


@pytest.mark.parametrize("setting", [{"truncate": "left"}, {"truncate": "right"}])
def test_truncation_lets_long_prompts_run(tmp_path: Path, tiny_llama: Path, setting: dict) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "word " * 600}])
    _, outcome = _run(tmp_path, tiny_llama, data, max_model_len=64, **setting)
    assert outcome.rows_failed == 0
    assert _export(tmp_path)[0]["prompt_tokens"] == 60


def test_a_job_can_run_outside_the_main_thread(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_jsonl(tmp_path / "in.jsonl", prompts(2))
    outcomes = []
    thread = threading.Thread(target=lambda: outcomes.append(_run(tmp_path, tiny_llama, data)[1]))
    thread.start()
    thread.join()
    assert outcomes and outcomes[0].complete
