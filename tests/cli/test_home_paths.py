"""A leading ~ in any path, from a flag, a job file or a command's argument, is the user's home, as a
shell would make it: never a directory named `~` in the working directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import DEMO_MODEL, invoke

from bulkinfer.cli.bench import bench_settings
from bulkinfer.cli.inspect_input import inspect_settings
from bulkinfer.cli.jobfile import read_job_file, read_json_files
from bulkinfer.cli.options import given_options
from bulkinfer.cli.run import run_settings
from bulkinfer.runner.config import JobConfig


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME is a fresh folder, and the working directory another, where no `~` may appear."""
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.mark.parametrize("settings", [run_settings(), bench_settings(), inspect_settings()],
                         ids=["run", "bench", "inspect"])
def test_every_path_setting_expands_from_flags_and_job_files(home: Path, tmp_path: Path, settings) -> None:
    paths = [s for s in settings if s.is_path]
    assert paths, "each command has path settings"
    for setting in paths:
        if setting.kinds == (dict[str, str],):  # NAME=PATH pairs (lora): the paths are the values
            flag, toml, expanded = ["a=~/x"], '{a = "~/x"}', {"a": str(home / "x")}
        else:
            flag = Path("~/x") if setting.item_type is Path else "~/x"  # as typer hands it over
            flag, toml = [flag] if setting.is_list else flag, '"~/x"'
            expanded = [str(home / "x")] if setting.is_list else str(home / "x")
        given = given_options({setting.name: flag}, settings)[setting.name]
        assert (list(map(str, given)) if setting.is_list else given if isinstance(given, dict) else str(given)) \
            == expanded
        job = tmp_path / "job.toml"
        job.write_text(f'{setting.name} = {toml}\n')
        if setting.name in {s.name for s in run_settings()}:
            assert read_job_file(job, run_settings())[setting.name] == expanded


def test_the_path_settings_of_run(home: Path) -> None:
    paths = {"model", "tokenizer", "input", "output", "json_schema", "chat_template", "tools", "lora"}
    assert {s.name for s in run_settings() if s.is_path} == paths


def test_python_callers_get_home_paths_too(home: Path) -> None:
    config = JobConfig.from_settings(model="~/model", input=["~/data"], output="~/out")
    assert (config.model, config.input, config.output) == (str(home / "model"), [str(home / "data")], str(home / "out"))


def test_a_schema_file_under_home_is_read_and_inline_json_is_left_alone(home: Path, tmp_path: Path) -> None:
    (home / "schema.json").write_text('{"type": "integer"}')
    job = tmp_path / "job.toml"
    job.write_text('json_schema = "~/schema.json"\n')
    assert read_json_files(read_job_file(job, run_settings()))["json_schema"] == '{"type": "integer"}'
    job.write_text("json_schema = '{\"const\": \"~/x\"}'\n")
    assert read_job_file(job, run_settings())["json_schema"] == '{"const": "~/x"}'


def test_a_job_file_and_every_command_take_home_paths(capsys, home: Path, tmp_path: Path) -> None:
    shutil.copytree(DEMO_MODEL, home / "model")
    (home / "data" / "in.jsonl").write_text('{"prompt": "1+1="}\n{"prompt": "2+2="}\n')
    job = tmp_path / "job.toml"
    job.write_text('model = "~/model"\ninput = "~/data/*.jsonl"\noutput = "~/runs/out"\n'
                   'max_tokens = 2\ntemperature = 0\n')
    code, _, err = invoke(capsys, "run", job)
    assert code == 0, err
    assert (home / "runs" / "out" / "job.json").is_file() and not (tmp_path / "~").exists()
    code, _, err = invoke(capsys, "run", "~/../job.toml")  # the job file's own path: the job is complete
    assert code == 0 and "complete" in err, err
    code, out, err = invoke(capsys, "status", "~/runs/out")
    assert code == 0 and out.startswith("complete"), err
    code, _, err = invoke(capsys, "export", "~/runs/out", "~/results.jsonl")
    assert code == 0 and (home / "results.jsonl").is_file(), err
    code, _, err = invoke(capsys, "run", "--model", "~/model", "--input", "~/data", "--output", "~/runs/flags",
                          "--max-tokens", "1")
    assert code == 0 and (home / "runs" / "flags" / "job.json").is_file(), err
    code, _, err = invoke(capsys, "inspect", "~/data/in.jsonl", "--model", "~/model")
    assert code == 0, err
    assert not (tmp_path / "~").exists()
