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
from bulkinfer.runner import ledger, shards


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str, nth: int) -> None:
    calls = {"count": 0}

    def is_nth() -> bool:
        calls["count"] += 1
        return calls["count"] == nth

    write_file, append = shards.ShardStore._write_file, ledger.Ledger.append

    def torn_shard(self, path, rows):
        write_file(self, path, rows)
        if is_nth():
            os.truncate(path, os.path.getsize(path) // 2)
            _die()

    def ledger_append(self, commit):
        if is_nth():
            if point == "ledger-write":
                line = ledger._encode(commit)
                self._handle.write(line[: len(line) // 2])
                self._handle.flush()
            _die()
        append(self, commit)

    if point == "shard-write":
        shards.ShardStore._write_file = torn_shard
    elif point in ("before-ledger", "ledger-write"):
        ledger.Ledger.append = ledger_append


if __name__ == "__main__":
    _arm(sys.argv[1], int(sys.argv[2]))
    main(sys.argv[3:])
