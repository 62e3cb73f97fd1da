"""`bulkinfer lm-eval ARGS...`: lm-evaluation-harness's own command line, every argument passed through."""

from __future__ import annotations

import typer

from bulkinfer.integrations.lm_eval_cli import lm_eval_main

# typer must not read any argument itself, not even --help: they all belong to lm_eval.
LM_EVAL_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def lm_eval_command(context: typer.Context) -> int:
    return lm_eval_main(list(context.args))
