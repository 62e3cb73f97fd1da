"""Run the CLI in a child process (via crash_driver.py) and look at its output directory meanwhile."""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from runner_files import committed

from bulkinfer.runner.outdir.ledger import load_progress
from bulkinfer.runner.outdir.remote_layout import RemoteJobDir
from bulkinfer.runner.storage import is_remote

DRIVER = Path(__file__).with_name("crash_driver.py")
# Small windows and shards, so that even a short job crosses many window and commit boundaries.
SETTINGS = dict(dtype="float32", max_tokens=6, temperature=0.0, max_num_seqs=8, window_rows=16, shard_rows=8,
                commit_seconds=0.3)


def start(model: Path, data: Path, out: Path | str, point: str = "none", nth: int = 0,
          extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> subprocess.Popen:
    """`extra`: more flags, after (so over) the shared SETTINGS; `env`: more environment variables (an
    object store's)."""
    flags = [part for name, value in SETTINGS.items() for part in ("--" + name.replace("_", "-"), str(value))]
    command = [sys.executable, str(DRIVER), point, str(nth), "run", "--model", str(model), "--input", str(data),
               "--output", str(out), *flags, *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def commits(out: Path | str) -> int:
    """Commits made so far, voided ones included; on object storage (`out` a URL), ledger entries."""
    if is_remote(str(out)):
        return RemoteJobDir(str(out)).load_progress().next_seq - 1
    try:
        return len(committed(out / "ledger.jsonl"))
    except FileNotFoundError:
        return 0


def wait_for(condition, process: subprocess.Popen, timeout: float = 120.0) -> bool:
    """Poll until `condition()` holds; False if the process ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    raise TimeoutError("the child process made no progress")


def assert_consistent(out: Path | str) -> None:
    """What a crash may leave: every committed file exists (whole), and no row is committed twice."""
    if is_remote(str(out)):
        directory = RemoteJobDir(str(out))
        progress, files = directory.load_progress(), directory.results()
        progress.done_rows()
        assert all(files.damage(commit.file, commit.size, None) is None for commit in progress.files)
        return
    progress = load_progress(out / "ledger.jsonl")
    progress.done_rows()  # raises if a row is committed twice
    for commit in progress.files:
        assert (out / "shards" / commit.file).is_file()


def killed_and_resumed(model: Path, data: Path | str, out: Path | str, extra: tuple[str, ...], seed: int,
                       kills: tuple[int, int] = (1, 2), longest_wait: float = 0.4,
                       env: dict[str, str] | None = None) -> None:
    """Run the job in a child process, SIGKILL it at random moments after a commit (at least kills[0] times,
    at most kills[1]), checking what each kill leaves; then run it to the end. `env`: see start."""
    run = functools.partial(start, model, data, out, extra=extra, env=env)
    done = kill_at_random(run, lambda: commits(out), lambda: assert_consistent(out), random.Random(seed), kills[1],
                          longest_wait)
    assert done >= kills[0]
    process = run()
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err


def kill_at_random(run: Callable[[], subprocess.Popen], progress: Callable[[], int], check: Callable[[], None],
                   generator: random.Random, most: int, longest_wait: float) -> int:
    """Start `run()` again and again, SIGKILLing it at a random instant once `progress()` (its commits) has
    grown, and calling `check()` after each end, until `most` kills or a run that finishes on its own; the
    number of kills."""
    done = 0
    for _ in range(6):
        process = run()
        before = progress()
        if wait_for(lambda: progress() > before, process):  # work is going on: kill at a random instant of it
            try:
                process.wait(timeout=generator.uniform(0.0, longest_wait))  # it may finish on its own meanwhile
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                done += 1
        process.communicate(timeout=300)
        check()
        if done == most or process.returncode == 0:
            break
    return done
