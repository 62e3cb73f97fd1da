"""reasoning_effort: gpt-oss's chat template writes it into the system message, wherever a prompt is rendered
(a job's messages, an OpenAI batch body, LLM.chat); for think-tag families it becomes a thinking budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harmony_checkpoint import build_harmony_tokenizer

from bulkinfer.engine.reasoning.effort import thinking_budget
from bulkinfer.openai_batch.convert import convert_batch_file
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.base import EngineFacts
from bulkinfer.runner.tasks.generate import GenerateTask
from bulkinfer.sampling_params import SamplingParams

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def tokenizer():
    return build_harmony_tokenizer()


def test_effort_is_a_thinking_budget_for_think_tag_families():
    assert thinking_budget(SamplingParams(reasoning_effort="low"), "qwen3") == 1024
    assert thinking_budget(SamplingParams(reasoning_effort="medium"), "deepseek_r1") == 4096
    assert thinking_budget(SamplingParams(reasoning_effort="high"), "qwen3") == 16384
    assert thinking_budget(SamplingParams(reasoning_effort="high", thinking_budget=100), "qwen3") == 100
    assert thinking_budget(SamplingParams(reasoning_effort="high"), "gpt_oss") is None  # its template's
    assert thinking_budget(SamplingParams(), "qwen3") is None


def test_an_unknown_effort_is_refused():
    with pytest.raises(ValueError, match="reasoning_effort must be one of low, medium, high, got 'max'"):
        SamplingParams(reasoning_effort="max")


def test_a_jobs_rows_carry_their_effort_into_gpt_oss_system_message(tokenizer):
    config = JobConfig.from_settings(model="m", input=["i"], output="o", messages_column="messages",
                                     max_tokens=8, reasoning_effort="low",
                                     param_columns={"reasoning_effort": "effort"})
    rows = [SourceRow(0, {"messages": QUESTION, "effort": "high"}, "line 1"),
            SourceRow(1, {"messages": QUESTION, "effort": None}, "line 2"),
            SourceRow(2, {"messages": QUESTION, "effort": "max"}, "line 3")]
    prepared = GenerateTask(config, EngineFacts(tokenizer, 4096)).prepare(rows)
    prompts = {work.row.index: tokenizer.decode(work.token_ids) for work in prepared.work}
    assert "Reasoning: high\n" in prompts[0]
    assert "Reasoning: low\n" in prompts[1]  # the job's setting
    assert [failure.error for failure in prepared.failures] == [
        "line 3: reasoning_effort must be one of low, medium, high, got 'max'"]


def test_an_openai_batch_body_carries_its_effort(tmp_path: Path, tokenizer):
    batch = tmp_path / "batch.jsonl"
    lines = [{"custom_id": name, "url": "/v1/chat/completions",
              "body": {"model": "m", "messages": QUESTION, **({"reasoning_effort": effort} if effort else {})}}
             for name, effort in (("a", "high"), ("b", None))]
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    table = tmp_path / "requests.jsonl"
    convert_batch_file(batch, table, tokenizer)
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    assert rows[0]["body_reasoning_effort"] == "high" and "Reasoning: high\n" in rows[0]["prompt"]
    assert rows[1]["body_reasoning_effort"] is None and "Reasoning: medium\n" in rows[1]["prompt"]


def test_llm_chat_renders_the_effort(tiny_harmony: Path):
    from bulkinfer import LLM

    llm = LLM(str(tiny_harmony), max_model_len=512)
    output = llm.chat(QUESTION, SamplingParams(max_tokens=1, reasoning_effort="high"), use_tqdm=False)[0]
    assert "Reasoning: high\n" in llm.tokenizer.decode(output.prompt_token_ids)
