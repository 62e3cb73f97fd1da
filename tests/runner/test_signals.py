"""SIGTERM and Ctrl-C on a real runner process: a clean stop with a resume hint, or at once on a second."""

import signal
from pathlib import Path

from runner_files import prompts, write_jsonl
from subprocess_job import assert_consistent, commits, start, wait_for

from bulkinfer.runner.status import job_status


def test_sigterm_stops_cleanly_and_says_how_to_resume(tmp_path: Path, tiny_llama: Path) -> None:
    data, out = write_jsonl(tmp_path / "in.jsonl", prompts(200)), tmp_path / "out"
    process = start(tiny_llama, data, out)
    assert wait_for(lambda: commits(out) >= 1, process)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert "stopping: committing finished rows" in err and "Run the same command again to resume" in err
    assert_consistent(out)
    status = job_status(out)
    assert status.state == "interrupted" and 0 < status.rows_done < 200


def read_until(process, marker: str) -> str:
    """stderr lines up to and including the first that holds marker (or all, if the process ends)."""
    lines = []
    for line in iter(process.stderr.readline, ""):
        lines.append(line)
        if marker in line:
            break
    return "".join(lines)


def test_a_second_signal_exits_at_once(tmp_path: Path, tiny_llama: Path) -> None:
    data, out = write_jsonl(tmp_path / "in.jsonl", prompts(20)), tmp_path / "out"
    process = start(tiny_llama, data, out)
    # job.json is written after the handlers are in place and before the model loads.
    assert wait_for(lambda: (out / "job.json").exists(), process)
    process.send_signal(signal.SIGINT)
    # Two signals that arrive while the interpreter is inside C code run the handler once, so the
    # second goes only after the first has been handled.
    seen = read_until(process, "stopping:")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    err = seen + err
    assert process.returncode == 130, err
    assert "second signal, exiting now" in err
    assert job_status(out).state == "interrupted"
