"""A three-stage pipeline killed with SIGKILL at random moments in each stage resumes where it stopped,
and its final export equals that of an uninterrupted run."""

import functools
import random
import subprocess
import sys
from pathlib import Path

import pytest
from runner_files import write_jsonl
from subprocess_job import DRIVER, SETTINGS, assert_consistent, commits, kill_at_random

from bulkinfer.runner.pipeline import Pipeline

pytestmark = pytest.mark.slow  # child processes killed and resumed

ROWS = 40
STAGE_NAMES = ("generate", "continue", "reward")


def _stages(tiny_llama: Path, reward_model: Path) -> list[dict]:
    pace = {key: value for key, value in SETTINGS.items() if key != "max_tokens"}
    return [
        dict(name="generate", model=str(tiny_llama), max_tokens=4, n=2, explode=True, **pace),
        dict(name="continue", model=str(tiny_llama), max_tokens=4, prompt_template="{prompt} {generated_text}",
             **pace),
        dict(name="reward", model=str(reward_model), task="reward", prompt_template="{prompt}{generated_text}",
             rank_by="reward", keep_top=1, **pace),
    ]


def _toml(stages: list[dict], data: Path, out: Path) -> str:
    def value(item) -> str:
        return repr(item).lower() if isinstance(item, bool) else (f'"{item}"' if isinstance(item, str) else repr(item))
    tables = ["[[stages]]\n" + "".join(f"{key} = {value(item)}\n" for key, item in stage.items()) for stage in stages]
    return f'input = "{data}"\noutput = "{out}"\n\n' + "\n".join(tables)


def test_a_pipeline_killed_in_each_stage_exports_what_an_uninterrupted_run_does(
        tmp_path: Path, tiny_llama: Path, checkpoint_factory) -> None:
    reward_model = checkpoint_factory("qwen3", classifier=True, num_labels=1)
    generator = random.Random(9)
    words = ["cat", "river", "seven", "mat", "quick", "answer", "sea", "night"]
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt": " ".join(generator.choices(words, k=generator.randint(1, 9)))}
                                               for _ in range(ROWS)])
    stages = _stages(tiny_llama, reward_model)
    baseline = Pipeline(str(data), tmp_path / "base", stages)
    baseline.run()

    out = tmp_path / "out"
    pipeline_file = tmp_path / "pipeline.toml"
    pipeline_file.write_text(_toml(stages, data, out))
    run = functools.partial(subprocess.Popen, [sys.executable, str(DRIVER), "none", "0", "run", str(pipeline_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kills = 0
    for number, name in enumerate(STAGE_NAMES, 1):
        stage_dir = out / "stages" / f"{number:02d}-{name}"
        kills += kill_at_random(run, functools.partial(commits, stage_dir), functools.partial(_consistent, out),
                                generator, 1, 0.5)
    assert kills >= 2
    process = run()
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err

    resumed = Pipeline(str(data), out, stages)
    assert resumed.rows() == baseline.rows()
    assert [row["source_row"] for row in resumed.rows()] == list(range(ROWS))


def _consistent(out: Path) -> None:
    for stage_dir in sorted((out / "stages").iterdir()) if (out / "stages").is_dir() else []:
        if (stage_dir / "ledger.jsonl").exists():
            assert_consistent(stage_dir)
