"""The command line: one-line usage errors with exit 2, and run/status/export wired to the runner."""

import json
from pathlib import Path

import pytest

from bulkinfer.cli import main
from runner_files import prompts, read_results, write_jsonl


def _main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "in.jsonl", prompts(4) + ["not json"])


@pytest.mark.parametrize("arguments, message", [
    (["--temperature", "warm"], "Invalid value for '--temperature'"),
    (["--bogus"], "No such option: --bogus"),
    (["--truncate", "middle"], "truncate must be one of left, right, got 'middle'"),
    (["--temperature", "-1"], "bad sampling setting: temperature must be >= 0, got -1.0"),
    (["--param-column", "max_tokens"], "--param-column 'max_tokens': expected PARAM=COLUMN"),
    (["--param-column", "dtype=x"], "param_columns: dtype cannot be set per row"),
    (["--prompt-column", "text"], "in.jsonl: no column 'text' (from prompt_column); its columns are: k, prompt"),
    (["--output", "/proc/no/such/place"], "/proc/no/such/place: cannot create the output directory"),
    (["--input", "missing.jsonl"], "missing.jsonl: no such file or directory"),
    (["--model", "/no/such/model"], "/no/such/model: no such model directory"),
    (["--attention-backend", "fast"], "attention_backend must be one of"),  # refused by the engine itself
])
def test_usage_mistakes_print_one_line_and_exit_2(capsys, tmp_path: Path, tiny_llama: Path, data: Path,
                                                  arguments: list[str], message: str) -> None:
    base = {"--model": str(tiny_llama), "--input": str(data), "--output": str(tmp_path / "out")}
    for flag in ("--model", "--input", "--output"):
        if flag in arguments:
            base[flag] = arguments.pop(arguments.index(flag) + 1)
            arguments.remove(flag)
    code, out, err = _main(capsys, "run", *[part for pair in base.items() for part in pair], *arguments)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bulkinfer: error: ") and message in err, err


def test_missing_required_settings_are_named(capsys) -> None:
    code, _, err = _main(capsys, "run", "--model", "m")
    assert (code, err) == (2, "bulkinfer: error: missing --input, --output\n")


def test_help_shows_defaults(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one option per line
    code, out, _ = _main(capsys, "run", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "--max-tokens" in flat and "(default: 256)" in flat and "--no-prefix-caching" in flat


def test_run_status_export(capsys, tmp_path: Path, tiny_llama: Path, data: Path) -> None:
    run = ["run", "--model", str(tiny_llama), "--input", str(data), "--output", str(tmp_path / "out"),
           "--max-tokens", "3", "--temperature", "0"]
    code, _, err = _main(capsys, *run)
    assert code == 0 and "complete: 5 of 5 rows done, 1 with errors" in err and "bulkinfer export" in err
    code, out, _ = _main(capsys, "status", str(tmp_path / "out"), "--json")
    assert code == 0 and json.loads(out) == {"rows_total": 5, "rows_done": 5, "rows_failed": 1, "state": "complete"}
    code, out, _ = _main(capsys, "status", str(tmp_path / "out"))
    assert out == "complete: 5 of 5 rows done, 1 with errors\n"
    code, _, err = _main(capsys, "export", str(tmp_path / "out"), str(tmp_path / "results.jsonl"))
    assert code == 0 and "wrote 5 rows (1 with errors)" in err
    assert [row["row_index"] for row in read_results(tmp_path / "results.jsonl")] == [0, 1, 2, 3, 4]
    code, _, _ = _main(capsys, *run, "--fail-on-error")
    assert code == 1  # the job is complete; its error row now fails the run


def test_status_and_export_of_a_non_job_are_usage_errors(capsys, tmp_path: Path) -> None:
    for argv in (["status", str(tmp_path)], ["export", str(tmp_path), str(tmp_path / "x.parquet")]):
        code, _, err = _main(capsys, *argv)
        assert code == 2 and err == f"bulkinfer: error: {tmp_path}: not a bulkinfer output directory (no job.json)\n"
