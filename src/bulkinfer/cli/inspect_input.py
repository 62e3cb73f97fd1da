"""`bulkinfer inspect`: a dry run before a long job: what is in the input and how much work it is."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator

import typer
from rich.console import Console
from rich.table import Table

from bulkinfer.cli.histogram import histogram_table, length_bins
from bulkinfer.cli.jobfile import read_json_files
from bulkinfer.cli.kv_footprint import kv_cache_line
from bulkinfer.cli.metrics import duration
from bulkinfer.cli.options import given_options, option_parameters
from bulkinfer.cli.run import run_settings
from bulkinfer.cli.summary import cost_per_million
from bulkinfer.cli.tokenizer import model_tokenizer
from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import PromptRenderer
from bulkinfer.runner.readers import Source, columns_of, read_rows, windows
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import check_columns, resolve_sources, scan_inputs
from bulkinfer.runner.tasks import reserved_columns
from bulkinfer.settings import Setting, expand_home, setting, settings_of

WINDOW = 10_000  # rows tokenized per batch call


@dataclass
class Survey:
    lengths: list[int] = field(default_factory=list)  # per usable row, in tokens (or characters)
    unusable: int = 0  # rows that would become error rows
    shown: list[str] = field(default_factory=list)  # the first prompts, as --show-prompt prints them


# The job settings that change what inspect counts; with the same flags and help as `run`.
JOB_SETTINGS = ("prompt_column", "messages_column", "system_prompt", "chat_template", "chat_template_kwargs", "tools",
                "tokenizer", "revision", "input_format", "storage_options", "max_tokens", "n", "dtype",
                "kv_cache_dtype", "model_impl")


@dataclass
class InspectSettings:
    model: str | None = setting(None, "Count tokens with this model's tokenizer (default: none; lengths in "
                                      "characters).", path=True, panel="Model")
    output_tok_s: float | None = setting(None, "Output tokens per second to expect, e.g. from a small run's "
                                               "stats.json or `bulkinfer bench`; gives the time, and with "
                                               "--hourly-cost the cost (default: none).", panel="Output")
    show_prompt: int = setting(0, "Print the first N prompts as the model will see them (rendered with the "
                                  "chat template with --model).", panel="Output")


def inspect_settings() -> list[Setting]:
    by_name = {s.name: s for s in run_settings()}
    return [*settings_of(InspectSettings), *(by_name[name] for name in (*JOB_SETTINGS, "hourly_cost"))]


def inspect_command(input: list[str], **options: Any) -> int:
    given = read_json_files(given_options(options, inspect_settings()))
    model, hourly_cost, output_tok_s, show_prompt = (
        given.pop(name, None) for name in ("model", "hourly_cost", "output_tok_s", "show_prompt"))
    if show_prompt is not None and show_prompt < 0:
        raise UsageError(f"show_prompt must be >= 0, got {show_prompt}")
    config = JobConfig.from_settings(model=model or "", input=input, output="", **given)
    sources = resolve_sources(config.input, config.input_format, config.storage_options)
    check_columns(sources, config)
    tokenizer = model_tokenizer(model, config.engine.tokenizer, config.engine.revision) if model else None
    renderer = PromptRenderer(config, tokenizer) if model else None
    survey = _survey(sources, config, renderer, show_prompt or 0)
    console = Console()
    if model:
        console.print(_model_table(model, config))
    for number, prompt in enumerate(survey.shown, 1):
        console.rule(f"prompt {number}")
        console.print(prompt, markup=False, highlight=False)
    console.print(_overview(sources, survey))
    console.print(histogram_table(length_bins(survey.lengths), "tokens" if model else "characters"))
    console.print(_estimate(survey, config, model is not None, hourly_cost, output_tok_s))
    if model:
        console.print(_model_table(model, config))
    return 0


_INPUT = inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=list[str],
                           default=typer.Argument(..., help="Input files, directories or globs, as for run --input.",
                                                  callback=expand_home))
inspect_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_INPUT, *option_parameters(inspect_settings())], return_annotation=int)
inspect_command.__annotations__ = {p.name: p.annotation for p in inspect_command.__signature__.parameters.values()}


def _survey(sources: list[Source], config: JobConfig, renderer: PromptRenderer | None, show: int) -> Survey:
    survey = Survey()
    rows = read_rows(scan_inputs(sources), RowSet(), WINDOW, reserved=reserved_columns(config.task))
    for window in windows(rows, WINDOW):
        texts = list(_prompts(window, config, renderer, survey))
        survey.shown += texts[:show - len(survey.shown)]
        if renderer is None:
            survey.lengths += [len(text) for text in texts]
        elif texts:
            encoded = renderer.tokenizer(texts, add_special_tokens=renderer.adds_special_tokens)["input_ids"]
            survey.lengths += [len(ids) for ids in encoded]
    return survey


def _prompts(window: list, config: JobConfig, renderer: PromptRenderer | None, survey: Survey) -> Iterator[str]:
    for row in window:
        try:
            if row.error is not None:
                raise ValueError(row.error)
            yield renderer.render(row.values) if renderer else _plain_text(row.values, config)
        except (ValueError, KeyError, TypeError):
            survey.unusable += 1


def _plain_text(values: dict[str, Any], config: JobConfig) -> str:
    """The prompt's text when no tokenizer is at hand: chat messages' contents joined."""
    if config.messages_column:
        return "\n".join(message["content"] for message in values[config.messages_column])
    text = values[config.prompt_column]
    if not isinstance(text, str):
        raise TypeError(config.prompt_column)
    return text


def _overview(sources: list[Source], survey: Survey) -> Table:
    table = Table(title="input", title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_row("files", f"{len(sources):,}")
    table.add_row("rows", f"{len(survey.lengths) + survey.unusable:,} ({survey.unusable:,} would be error rows)")
    for source in sources:
        table.add_row(f"columns of {source.name}", ", ".join(sorted(columns_of(source) or [])) or "none")
    return table


def _model_table(model: str, config: JobConfig) -> Table:
    """The model's weight format and bytes, and what a token costs in its KV cache."""
    from bulkinfer.models.checkpoint import resolve_model_path
    from bulkinfer.models.footprint import footprint
    from bulkinfer.models.loader import read_config

    try:
        path = resolve_model_path(model, config.engine.revision)
        weights = footprint(path, read_config(path, config.engine.model_impl)[0])
    except ValueError as exc:  # not a model, or one bulkinfer refuses: its one-line reason
        raise UsageError(str(exc)) from None
    table = Table(title="model", title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_row("weights", f"{weights.weight_format}, {_size(weights.weight_bytes)}")
    table.add_row("KV cache", kv_cache_line(model, config.engine))
    return table


def _size(count: int) -> str:
    unit = max((u for u in range(4) if count >= 1024 ** u), default=0)
    return f"{count / 1024 ** unit:,.1f} {('bytes', 'KiB', 'MiB', 'GiB')[unit]}"


def _estimate(survey: Survey, config: JobConfig, in_tokens: bool, hourly_cost: float | None,
              output_tok_s: float | None) -> Table:
    table = Table(title="work estimate", title_justify="left", show_header=False, box=None, padding=(0, 1))
    unit = "tokens" if in_tokens else "characters (pass --model for tokens)"
    table.add_row("prompt", f"{sum(survey.lengths):,} {unit}")
    n, max_tokens = config.sampling.n, config.sampling.max_tokens
    output_tokens = len(survey.lengths) * n * max_tokens
    table.add_row("output", f"at most {output_tokens:,} tokens ({n} x {max_tokens} per row)")
    if output_tok_s:
        seconds = output_tokens / output_tok_s
        table.add_row("time", f"at most {duration(seconds)} at {output_tok_s:,.0f} output tok/s")
        if hourly_cost is not None:
            table.add_row("cost", f"at most {hourly_cost * seconds / 3600:,.4f} "
                                  f"({cost_per_million(hourly_cost, 3600, round(output_tok_s * 3600)):,.4f} "
                                  f"per million output tokens)")
    elif hourly_cost is not None:
        table.add_row("cost", "pass --output-tok-s (from a small run's stats.json) to turn the price into a cost")
    return table
