"""Run `bulkinfer` in a child process that can be told to die by SIGKILL at an exact point.

    python crash_driver.py POINT N bulkinfer-arguments...

POINT is one of: none; shard-write (the N-th result file's temporary file is half written);
before-ledger (the N-th result file is renamed into place, its ledger line not yet written);
ledger-write (half of the N-th ledger line is written); and, instead of a kill, a disk error at the
N-th commit: file-write-enospc (writing a result file), file-fsync-eio (its fsync), ledger-write-enospc
(half of a ledger line written), ledger-fsync-eio (the whole line written, then its fsync fails);
ledger-disk-full: the disk that holds the output directory fills up just before the first commit
line that needs a new page of it, so that the kernel itself refuses the append (on a small tmpfs);
and input-grows: the --input file gets its first line again, appended right after the N-th ledger line.
The runner itself has no hooks for this: the driver wraps its functions from outside, as a test
double would.
"""

from __future__ import annotations

import errno
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

    def torn_file(tmp, final, **folder):  # the temporary file written, half of it on disk, not yet renamed
        if is_nth():
            os.truncate(tmp, os.path.getsize(tmp) // 2)
            _die()
        publish(tmp, final, **folder)

    def ledger_append(self, commit):
        if is_nth():
            if point == "ledger-write":
                line = ledger._encode("commit", ledger._on_disk(commit))
                self._handle.write(line[: len(line) // 2])
                self._handle.flush()
            _die()
        append(self, commit)

    write_rows, sync = result_files.ResultFiles._write_rows, result_files.sync_file

    def file_write_fails(self, handle, rows):
        if is_nth():
            handle.write(b"PAR1 partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_rows(self, handle, rows)

    def file_fsync_fails(handle):
        if is_nth():
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        sync(handle)

    def ledger_append_fails(self, record):
        if is_nth():
            line = ledger._encode("commit", ledger._on_disk(record))
            self._handle.write(line if point == "ledger-fsync-eio" else line[: len(line) // 2])
            self._handle.flush()
            code = errno.EIO if point == "ledger-fsync-eio" else errno.ENOSPC
            raise OSError(code, os.strerror(code))
        append(self, record)

    def fill_disk_before_a_new_page(self, record):
        job = getattr(self, "_job_id", None)  # the id a commit is stamped with (none in older ledgers)
        line = ledger._encode("commit", {**ledger._on_disk(record), **({"job": job} if job else {})})
        if self._size // _PAGE != (self._size + len(line) - 1) // _PAGE:
            _fill(self.path.parent.parent / "filler")
        append(self, record)

    def input_grows(self, record):
        append(self, record)
        if is_nth():
            path = sys.argv[sys.argv.index("--input") + 1]
            with open(path, "rb") as source:
                first = source.readline()
            with open(path, "ab") as handle:
                handle.write(first)

    if point == "shard-write":
        result_files.publish = torn_file
    elif point in ("before-ledger", "ledger-write"):
        ledger.Ledger.append = ledger_append
    elif point == "file-write-enospc":
        result_files.ResultFiles._write_rows = file_write_fails
    elif point == "file-fsync-eio":
        result_files.sync_file = file_fsync_fails
    elif point in ("ledger-write-enospc", "ledger-fsync-eio"):
        ledger.Ledger.append = ledger_append_fails
    elif point == "ledger-disk-full":
        ledger.Ledger.append = fill_disk_before_a_new_page
    elif point == "input-grows":
        ledger.Ledger.append = input_grows


_PAGE = 4096  # tmpfs hands out whole pages: a write within the last one needs no free space


def _fill(path) -> None:
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"x" * _PAGE)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise


if __name__ == "__main__":
    _arm(sys.argv[1], int(sys.argv[2]))
    main(sys.argv[3:])
