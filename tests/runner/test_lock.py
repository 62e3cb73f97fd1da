import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bulkinfer.errors import UsageError
from bulkinfer.runner.outdir.lock import Holder, JobLock, current_holder, read_holder

HOLD = """
import sys, time
from pathlib import Path
from bulkinfer.runner.outdir.lock import JobLock
JobLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(120)
"""


def _holder_process(path: Path) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "locked"
    return process


def test_a_live_holder_is_refused_by_name_and_a_killed_one_is_taken_over(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    holder = _holder_process(path)
    try:
        with pytest.raises(UsageError, match=f"in use by another bulkinfer run \\(pid {holder.pid} on ") as refused:
            JobLock(path).acquire()
        assert "delete" not in str(refused.value)  # a held lock means a live holder: deleting it lets in a second
        assert current_holder(path).pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert current_holder(path) is None  # the kernel dropped the dead run's lock; its record stays
    assert read_holder(path).pid == holder.pid
    lock = JobLock(path)
    lock.acquire()
    assert read_holder(path).pid == os.getpid()
    lock.release()


def test_liveness_of_a_recorded_holder() -> None:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    here = socket.gethostname()
    assert not Holder(finished.pid, here, "").may_be_alive()
    assert Holder(os.getpid(), here, "").may_be_alive()
    assert Holder(finished.pid, "some-other-host", "").may_be_alive()  # cannot tell: assume it runs


@pytest.mark.slow
def test_a_run_whose_lock_file_was_deleted_stops_at_its_next_commit(tmp_path: Path, tiny_llama: Path) -> None:
    from runner_files import prompts, write_jsonl
    from subprocess_job import assert_consistent, commits, start, wait_for

    from bulkinfer.runner.export import export_job

    data, out = write_jsonl(tmp_path / "in.jsonl", prompts(600)), tmp_path / "out"
    first = start(tiny_llama, data, out)
    assert wait_for(lambda: commits(out) >= 1, first)
    (out / ".lock").unlink()  # what the old advice said to do while a run was live
    second = start(tiny_llama, data, out)
    _, first_err = first.communicate(timeout=300)
    _, second_err = second.communicate(timeout=300)
    assert first.returncode == 1, first_err
    errors = [line for line in first_err.splitlines() if line.startswith("bulkinfer: error:")]
    assert len(errors) == 1 and "its lock file was deleted or replaced" in errors[0], first_err
    assert second.returncode == 0, second_err
    assert_consistent(out)
    assert export_job(out, tmp_path / "out.parquet").rows == 600
