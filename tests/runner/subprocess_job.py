"""Run the CLI in a child process (via crash_driver.py) and look at its output directory meanwhile."""

from __future__ import annotations

import functools
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from runner_files import committed

from bulkinfer.runner.outdir.ledger import load_progress

DRIVER = Path(__file__).with_name("crash_driver.py")
# Small windows and shards, so that even a short job crosses many window and commit boundaries.
SETTINGS = dict(max_tokens=6, temperature=0.0, max_num_seqs=8, window_rows=16, shard_rows=8, commit_seconds=0.3)


def start(model: Path, data: Path, out: Path, point: str = "none", nth: int = 0,
          extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """`extra`: more flags, after (so over) the shared SETTINGS."""
    flags = [part for name, value in SETTINGS.items() for part in ("--" + name.replace("_", "-"), str(value))]
    command = [sys.executable, str(DRIVER), point, str(nth), "run", "--model", str(model), "--input", str(data),
               "--output", str(out), *flags, *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def commits(out: Path) -> int:
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


def assert_consistent(out: Path) -> None:
    """What a crash may leave: every committed file exists, and no row is committed twice."""
    progress = load_progress(out / "ledger.jsonl")
    progress.done_rows()  # raises if a row is committed twice
    for commit in progress.files:
        assert (out / "shards" / commit.file).is_file()


def killed_and_resumed(model: Path, data: Path, out: Path, extra: tuple[str, ...], seed: int,
                       kills: tuple[int, int] = (1, 2), longest_wait: float = 0.4) -> None:
    """Run the job in a child process, SIGKILL it at random moments after a commit (at least kills[0] times,
    at most kills[1]), checking what each kill leaves; then run it to the end."""
    run = functools.partial(start, model, data, out, extra=extra)
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
