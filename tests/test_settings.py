"""Every setting is declared once and reachable everywhere it belongs: each SamplingParams field from a
flag, a job-file key, a param column and lm-eval's model_args; each EngineConfig field from a flag and
a job-file key. The values go through the real parsers (click's, the TOML reader, lm_eval's), not
around them."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import typer

from bulkinfer.cli.app import app
from bulkinfer.cli.jobfile import read_job_file
from bulkinfer.cli.options import flag_of, given_options
from bulkinfer.cli.run import run_settings
from bulkinfer.engine.config import EngineConfig
from bulkinfer.integrations.lm_eval_settings import generation_defaults, llm_arguments, sampling_params
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import RowSettings
from bulkinfer.pooling_params import PoolingParams
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import Setting, settings_of

REQUIRED = {"model": "m", "input": ["in.jsonl"], "output": "out"}
# Values the generic rule below would not pass validation with.
SPECIAL = {"device": "cpu", "max_model_len": 64, "json_schema": "{}", "best_of": 1, "logit_bias": {5: 1.5},
           "tools": '[{"type": "function", "function": {"name": "f"}}]', "tool_choice": "required",
           "classifier_from_token": ["no", "yes"], "rerank_template": "{query} | {document}"}
# model_args is comma-separated KEY=VALUE text: JSON with commas in it, or a list of two, has no spelling there.
NO_MODEL_ARG = {"tools", "classifier_from_token"}


def _sample(setting: Setting) -> Any:
    """A valid value that differs from the setting's default, from its declared type."""
    if setting.name in SPECIAL:
        return SPECIAL[setting.name]
    if setting.choices:
        return next(choice for choice in setting.choices if choice != setting.default)
    if setting.is_bool:
        return not setting.default
    kind = setting.item_type
    value = {int: 3, float: 0.5, str: "x"}[kind]
    return [value] if setting.is_list else value


def _flags(setting: Setting, value: Any) -> list[str]:
    if setting.is_bool:
        return [flag_of(setting) if value else f"--no-{flag_of(setting).removeprefix('--')}"]
    if isinstance(value, dict):
        value = [f"{key}={item}" for key, item in value.items()]
    values = value if isinstance(value, list) else [value]
    return [part for item in values for part in (flag_of(setting), str(item))]


def _from_flags(arguments: list[str]) -> JobConfig:
    run = typer.main.get_command(app).commands["run"]
    flags = [part for name, value in REQUIRED.items() for part in _flags(_by_name(name), value)]
    context = run.make_context("run", flags + arguments)
    return JobConfig.from_settings(**given_options(dict(context.params), run_settings()))


def _from_job_file(tmp_path: Path, setting: Setting, value: Any) -> JobConfig:
    lines = [f"{name} = {_toml(value)}" for name, value in {**REQUIRED, setting.name: value}.items()]
    path = tmp_path / "job.toml"
    path.write_text("\n".join(lines) + "\n")
    return JobConfig.from_settings(**read_job_file(path, run_settings()))


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f'"{key}" = {_toml(item)}' for key, item in value.items()) + " }"
    return json.dumps(value) if isinstance(value, str) else repr(value)  # a JSON string is a TOML one


def _by_name(name: str) -> Setting:
    return next(s for s in run_settings() if s.name == name)


def _expected(setting: Setting, value: Any) -> Any:
    # SamplingParams keeps stop as a list, however it was given.
    return value if setting.is_list or not any(typing.get_origin(k) is list for k in setting.kinds) else [value]


SAMPLING = settings_of(SamplingParams)
ENGINE = settings_of(EngineConfig)


def test_every_field_is_declared_as_a_setting():
    for cls, declared in ((SamplingParams, SAMPLING), (EngineConfig, ENGINE)):
        assert [f.name for f in dataclasses.fields(cls)] == [s.field for s in declared]
        assert all(s.help for s in declared), [s.name for s in declared if not s.help]


@pytest.mark.parametrize("setting", SAMPLING, ids=[s.name for s in SAMPLING])
def test_a_sampling_option_is_reachable_from_every_place(tmp_path: Path, setting: Setting) -> None:
    value = _sample(setting)
    expected = _expected(setting, value)
    assert getattr(JobConfig.from_settings(**REQUIRED).sampling, setting.field) != expected
    assert getattr(_from_flags(_flags(setting, value)).sampling, setting.field) == expected
    assert getattr(_from_job_file(tmp_path, setting, value).sampling, setting.field) == expected
    per_row = JobConfig.from_settings(**REQUIRED, param_columns={setting.name: "col"})
    row = RowSettings(per_row).for_row(7, {"col": value})
    assert getattr(row, setting.field) == expected
    if setting.is_dict or setting.name in NO_MODEL_ARG:  # model_args is KEY=VALUE text, with no form for these
        return
    model_args = _lm_eval_model_args(f"{setting.name}={','.join(map(str, expected)) if setting.is_list else value}")
    if setting.name != "n":  # a generate_until request returns one text: n other than 1 is refused, see below
        generated = sampling_params({}, generation_defaults(model_args, None), "")
        assert getattr(generated, setting.field) == (expected if setting.name != "stop" else [*expected])


def test_lm_eval_refuses_n_above_one_rather_than_dropping_samples():
    with pytest.raises(ValueError, match="n must be 1"):
        sampling_params({}, generation_defaults({"n": 2}, None), "")


@pytest.mark.parametrize("setting", ENGINE, ids=[s.name for s in ENGINE])
def test_an_engine_option_is_reachable_from_a_flag_and_a_job_file(tmp_path: Path, setting: Setting) -> None:
    value = _sample(setting)
    assert getattr(JobConfig.from_settings(**REQUIRED).engine, setting.field) != value
    assert getattr(_from_flags(_flags(setting, value)).engine, setting.field) == value
    assert getattr(_from_job_file(tmp_path, setting, value).engine, setting.field) == value
    if setting.name in NO_MODEL_ARG:
        return
    assert llm_arguments("m", None, _lm_eval_model_args(f"{setting.name}={value}"))[setting.field] == value


POOLING = settings_of(PoolingParams)


@pytest.mark.parametrize("setting", POOLING, ids=[s.name for s in POOLING])
def test_a_pooling_option_is_reachable_from_a_flag_and_a_job_file(tmp_path: Path, setting: Setting) -> None:
    value = _sample(setting)
    assert getattr(JobConfig.from_settings(**REQUIRED).pooling_params, setting.field) != value
    assert getattr(_from_flags(_flags(setting, value)).pooling_params, setting.field) == value
    assert getattr(_from_job_file(tmp_path, setting, value).pooling_params, setting.field) == value


def test_the_engine_is_given_every_option_of_the_job():
    from bulkinfer.runner.job import _engine_options

    config = JobConfig.from_settings(**REQUIRED, max_num_seqs=3, engine_seed=9)
    assert _engine_options(config) == {**dataclasses.asdict(EngineConfig()), "max_num_seqs": 3, "seed": 9}


def _lm_eval_model_args(text: str) -> dict[str, Any]:
    lm_eval_utils = pytest.importorskip("lm_eval.utils")
    return lm_eval_utils.simple_parse_args_string(text)


def test_the_settings_reference_is_current():
    script = Path(__file__).resolve().parents[1] / "scripts" / "settings_reference.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
