"""The `bulkinfer` command's app: one verb per subcommand; exit 0 success, 1 failure, 2 a usage mistake."""

from __future__ import annotations

import logging
import sys

import typer
import typer.rich_utils

import bulkinfer
from bulkinfer.cli.bench import bench_command
from bulkinfer.cli.export import export_command, status_command
from bulkinfer.cli.inspect_input import inspect_command
from bulkinfer.cli.lm_eval import LM_EVAL_SETTINGS, lm_eval_command
from bulkinfer.cli.run import run_command
from bulkinfer.cli.run_batch import run_batch_command
from bulkinfer.errors import RunError, UsageError

# Recent typer vendors click, so its usage errors are not click's; the public BadParameter leads to their base.
CLI_USAGE_ERRORS = tuple(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError")

# Rich help: flags in panels (settings.PANELS), and each command's whole description in the list of commands.
app = typer.Typer(name="bulkinfer", help="Offline bulk batch inference for LLMs.", add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode="rich")
app.command("run", help="Run a job over a dataset, or resume it.")(run_command)
app.command("run-batch", help="Run an OpenAI batch file, as vllm run-batch does.")(run_batch_command)
app.command("export", help="Write a job's results, in input order, to one .parquet or .jsonl file.")(export_command)
app.command("status", help="Report how far a job is.")(status_command)
app.command("inspect", help="Dry run: rows, columns, prompt lengths and the work a job over INPUT would be.")(
    inspect_command)
app.command("bench", help="Throughput benchmark: bulkinfer beside transformers' batching.")(bench_command)
app.command("lm-eval", help="lm-evaluation-harness with the bulkinfer backend; every argument goes to lm_eval.",
            context_settings=LM_EVAL_SETTINGS, add_help_option=False)(lm_eval_command)


def _fold_long_flags() -> None:
    """In a narrow terminal rich cuts long flag names short with an ellipsis (--max-num-batche…); a flag
    the user cannot read whole is no help, so they wrap onto a second line instead."""
    for name in ("highlighter", "negative_highlighter", "types_highlighter"):
        plain = getattr(typer.rich_utils, name)

        def folding(text, plain=plain):
            highlighted = plain(text)
            highlighted.overflow = "fold"
            return highlighted

        setattr(typer.rich_utils, name, folding)


_fold_long_flags()


def _show_version(wanted: bool) -> None:
    if wanted:
        print(f"bulkinfer {bulkinfer.__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                          help="Print bulkinfer's version and exit.")) -> None:
    pass


def run(argv: list[str] | None = None) -> None:
    """A user's mistake prints one line, with no traceback, and exits 2; a job that cannot go on (a full
    disk, a lost lock) one line and exit 1. `bulkinfer` alone prints the help."""
    _log_to_stderr()
    command = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else argv
    try:
        code = command.main(args=args or ["--help"], prog_name="bulkinfer", standalone_mode=False)
    except (*CLI_USAGE_ERRORS, UsageError) as exc:
        message = str(exc) if isinstance(exc, UsageError) else exc.format_message()
        print(f"bulkinfer: error: {message}", file=sys.stderr)
        sys.exit(2)
    except RunError as exc:
        print(f"bulkinfer: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt):  # Ctrl-C outside a job: while starting up, or in another command
        print("bulkinfer: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes, not when the handler was made."""

    @property
    def stream(self):  # noqa: D102
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def _log_to_stderr() -> None:
    """The library's warnings (a repaired file, an empty input) as `bulkinfer: ...` lines."""
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("bulkinfer: %(message)s"))
    library = logging.getLogger("bulkinfer")
    library.handlers[:] = [handler]
    library.setLevel(logging.INFO)
    library.propagate = False
    # Said by TorchInductor's first CPU compile on any machine with a CUDA toolkit and no GPU; not our user's concern.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    # An object store that goes away mid-upload leaves s3fs's pending aiohttp writes failed and unread; asyncio
    # logs each with its traceback. The failure itself reaches the user once, as the run's one error line.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
