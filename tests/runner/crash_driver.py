"""Run `bulkinfer` in a child process that can be told to die by SIGKILL at an exact point.

    python crash_driver.py POINT N bulkinfer-arguments...

POINT is one of: none; shard-write (the N-th shard's temporary file is half written);
before-ledger (the N-th shard is renamed into place, its ledger line not yet written);
ledger-write (half of the N-th ledger line is written). The runner itself has no hooks for this:
the driver wraps its functions from outside, as a test double would.
"""

from __future__ import annotations

import os
import signal
import sys

from bulkinfer.cli import main
from bulkinfer.runner.outdir import ledger, result_files


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str, nth: int) -> None:
    calls = {"count": 0}

    def is_nth() -> bool:
        calls["count"] += 1
        return calls["count"] == nth

    publish, append = result_files.publish, ledger.Ledger.append

    def torn_file(tmp, final):  # the temporary file written, half of it on disk, not yet renamed
        if is_nth():
            os.truncate(tmp, os.path.getsize(tmp) // 2)
            _die()
        publish(tmp, final)

    def ledger_append(self, commit):
        if is_nth():
            if point == "ledger-write":
                line = ledger._encode("commit", ledger._on_disk(commit))
                self._handle.write(line[: len(line) // 2])
                self._handle.flush()
            _die()
        append(self, commit)

    if point == "shard-write":
        result_files.publish = torn_file
    elif point in ("before-ledger", "ledger-write"):
        ledger.Ledger.append = ledger_append


if __name__ == "__main__":
    _arm(sys.argv[1], int(sys.argv[2]))
    main(sys.argv[3:])
