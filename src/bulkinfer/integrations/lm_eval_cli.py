"""``bulkinfer lm-eval ARGS``: lm-evaluation-harness's own command line, with the ``bulkinfer``
backend registered and every argument passed through unchanged."""

from __future__ import annotations

import importlib.util
import sys

from bulkinfer.integrations import LM_EVAL_INSTALL_HINT

PROGRAM = "bulkinfer lm-eval"


def lm_eval_main(argv: list[str]) -> int:
    """Run lm_eval's command line on argv (the arguments after ``lm-eval``); return the exit
    status: 0 done, 1 failed, 2 a usage mistake or lm_eval not installed."""
    if importlib.util.find_spec("lm_eval") is None:
        print(f"{PROGRAM}: {LM_EVAL_INSTALL_HINT}", file=sys.stderr)
        return 2
    from lm_eval.__main__ import cli_evaluate

    import bulkinfer.integrations.lm_eval  # noqa: F401  (importing it registers the backend)
    from bulkinfer.integrations.lm_eval_settings import ModelArgsError

    saved_argv = sys.argv
    # lm_eval's entry point reads sys.argv itself (and inserts its "run" subcommand there).
    sys.argv = [PROGRAM, *argv]
    try:
        cli_evaluate()
    except ModelArgsError as exc:
        print(f"{PROGRAM}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: 0 after --help, 2 for a usage mistake
        return _exit_status(exc.code)
    finally:
        sys.argv = saved_argv
    return 0


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python itself would do with a message as exit code
    return 1
