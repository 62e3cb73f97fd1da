"""Job files: flat keys like the flags, flags win, and every mistake in one is one line with exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import DEMO_MODEL, REPO, invoke, one_line_error

from bulkinfer.cli.jobfile import merge_settings, read_job_file
from bulkinfer.cli.run import run_settings
from bulkinfer.errors import UsageError

DATA = REPO / "examples" / "data" / "eval-suite.jsonl"


def _job(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def test_keys_are_read_in_the_flags_form(tmp_path: Path) -> None:
    settings = read_job_file(_job(tmp_path, 'model = "m"\ninput = "a.jsonl"\ntemperature = 0\n'
                                            'stop = "x"\nparam_columns = { seed = "s" }\nhourly_cost = 2\n'),
                             run_settings())
    assert settings == {"model": "m", "input": ["a.jsonl"], "temperature": 0.0, "stop": ["x"],
                        "param_columns": {"seed": "s"}, "hourly_cost": 2.0}


def test_flags_that_were_given_override_the_file() -> None:
    merged = merge_settings({"max_tokens": 8, "temperature": 0.0}, {"max_tokens": 16, "temperature": None, "stop": []})
    assert merged == {"max_tokens": 16, "temperature": 0.0}


@pytest.mark.parametrize("text, message", [
    ('model = "m"\nmax_token = 8\n', "unknown key max_token (did you mean max_tokens?)"),
    ("max_tokens = 'eight'\n", "max_tokens must be an integer, got 'eight'"),
    ("temperature = true\n", "temperature must be a number, got True"),
    ("force = 1\n", "force must be true or false, got 1"),
    ("input = [1, 2]\n", "input must be a string or a list of strings"),
    ("model = \n", "not a valid TOML job file"),
])
def test_bad_job_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        read_job_file(_job(tmp_path, text), run_settings())


def test_unknown_key_on_the_command_line_suggests_the_closest(capsys, tmp_path: Path) -> None:
    err = one_line_error(*invoke(capsys, "run", _job(tmp_path, "modle = 'x'\n"))[::2])
    assert "unknown key modle (did you mean model?)" in err and "bulkinfer run --help" in err


def test_missing_job_file_is_one_line(capsys, tmp_path: Path) -> None:
    err = one_line_error(*invoke(capsys, "run", tmp_path / "nope.toml")[::2])
    assert "nope.toml: no such job file" in err


def test_flag_overrides_file_in_a_run(capsys, tmp_path: Path) -> None:
    job = _job(tmp_path, f'model = "{DEMO_MODEL}"\ninput = "{DATA}"\noutput = "{tmp_path / "out"}"\n'
                         f'temperature = 0\nmax_tokens = 8\n')
    code, _, err = invoke(capsys, "run", job, "--max-tokens", "1", "--output", tmp_path / "other")
    assert code == 0, err
    stats = json.loads((tmp_path / "other" / "stats.json").read_text())
    assert stats["settings"]["max_tokens"] == 1 and stats["output_tokens"] == stats["rows_done"] == 60
    assert not (tmp_path / "out").exists()
