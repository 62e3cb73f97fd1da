"""The `bulkinfer` command. Its commands, and all they import, load inside main(), so that a Ctrl-C
while they load ends with one line like any other."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    try:
        from bulkinfer.cli.app import run
    except KeyboardInterrupt:
        print("bulkinfer: interrupted", file=sys.stderr)
        sys.exit(130)
    run(argv)
