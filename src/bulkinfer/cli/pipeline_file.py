"""Pipeline files: a job file with `[[stages]]` tables, run by `bulkinfer run PIPELINE.toml`.

    input = "prompts.jsonl"
    output = "out"

    [[stages]]
    name = "generate"
    model = "policy-model"
    n = 4
    explode = true

    [[stages]]
    name = "reward"
    model = "reward-model"
    task = "reward"
    prompt_template = "{prompt}{generated_text}"
    rank_by = "reward"
    keep_top = 1

Each stage's keys are checked as a job file's are (cli/jobfile.py), against a job's settings and a
stage's own (runner/pipeline/stage.py), before anything runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bulkinfer.cli.display import ProgressDisplay
from bulkinfer.cli.jobfile import check_keys, read_json_files
from bulkinfer.cli.summary import rows_done
from bulkinfer.errors import UsageError
from bulkinfer.runner.config import job_settings
from bulkinfer.runner.pipeline import Pipeline, Stage, StageSettings
from bulkinfer.runner.pipeline.stage import split_table, stage_job_keys, stage_keys
from bulkinfer.runner.signals import StopSignals

PIPELINE_KEYS = ("input", "output", "input_format")


def is_pipeline_file(values: dict[str, Any]) -> bool:
    return "stages" in values


def read_pipeline(path: Path, values: dict[str, Any]) -> Pipeline:
    """The pipeline the file's keys describe (`values`, as read), every stage checked."""
    stages = values.pop("stages")
    if not isinstance(stages, list) or not all(isinstance(table, dict) for table in stages):
        raise UsageError(f"{path}: stages must be [[stages]] tables")
    top = check_keys(str(path), values, [s for s in job_settings() if s.name in PIPELINE_KEYS])
    missing = [key for key in ("input", "output") if key not in top]
    if missing:
        raise UsageError(f"{path}: missing {' and '.join(missing)} (at the top, before the [[stages]] tables)")
    return Pipeline(top["input"], top["output"], [_stage(path, table) for table in stages], top.get("input_format"))


def run_pipeline_file(path: Path, values: dict[str, Any]) -> int:
    pipeline = read_pipeline(path, values)
    with StopSignals() as signals:
        with ProgressDisplay(live=sys.stderr.isatty()) as display:
            outcomes = pipeline.run(reporter=lambda stage: _announce(pipeline, stage, display), signals=signals)
    last = outcomes[-1].job
    if last is not None and not last.complete:
        print(f"bulkinfer: stopped in stage {outcomes[-1].stage}: {rows_done(last)}. Run the same command again to "
              f"resume.", file=sys.stderr)
        return 128 + last.stopped_by if last.stopped_by is not None else 1
    print(f"bulkinfer: pipeline complete. Export its output with: bulkinfer export {pipeline.output} "
          f"RESULTS.parquet (one stage's: --stage NAME)", file=sys.stderr)
    failing = [outcome for outcome, stage in zip(outcomes, pipeline.stages)
               if outcome.job is not None and outcome.job.rows_failed and stage.job.get("fail_on_error")]
    for outcome in failing:
        print(f"bulkinfer: stage {outcome.stage} has {outcome.job.rows_failed:,} error rows (fail_on_error)",
              file=sys.stderr)
    return 1 if failing else 0


def _stage(path: Path, table: dict[str, Any]) -> Stage:
    own, job = split_table(table)
    where = f"{path} stage {own['name']}"
    own = check_keys(where, own, stage_keys())
    job = read_json_files(check_keys(where, job, stage_job_keys()))
    return Stage(StageSettings(**own), job)


def _announce(pipeline: Pipeline, stage: Stage, display: ProgressDisplay) -> ProgressDisplay:
    print(f"bulkinfer: stage {pipeline.stages.index(stage) + 1} of {len(pipeline.stages)}: {stage.name} "
          f"({stage.task}, {stage.job['model']})", file=sys.stderr)
    return display
