"""`bulkinfer inspect`: a dry run before a long job: what is in the input and how much work it is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table

from bulkinfer.cli.histogram import histogram_table, length_bins
from bulkinfer.cli.metrics import duration
from bulkinfer.cli.summary import cost_per_million
from bulkinfer.cli.tokenizer import model_tokenizer
from bulkinfer.runner import jsonl_reader, parquet_reader
from bulkinfer.runner.columns import check_columns
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.inputs import read_rows, scan_inputs, windows
from bulkinfer.runner.prompts import PromptRenderer
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import Source, resolve_sources

WINDOW = 10_000  # rows tokenized per batch call


@dataclass
class Survey:
    lengths: list[int] = field(default_factory=list)  # per usable row, in tokens (or characters)
    unusable: int = 0  # rows that would become error rows


def inspect_command(
    input: list[str] = typer.Argument(..., help="Input files, directories or globs, as for run --input."),
    model: Optional[str] = typer.Option(None, "--model", help="Count tokens with this model's tokenizer "
                                                              "(default: none; lengths in characters)."),
    prompt_column: str = typer.Option("prompt", "--prompt-column", help="Column with the prompt text."),
    messages_column: Optional[str] = typer.Option(None, "--messages-column", show_default=False,
                                                  help="Column with chat messages (default: none)."),
    input_format: Optional[str] = typer.Option(None, "--input-format", show_default=False,
                                               help="parquet or jsonl (default: from each file's extension)."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Most tokens generated per sample."),
    n: int = typer.Option(1, "--n", min=1, help="Samples per row."),
    hourly_cost: Optional[float] = typer.Option(None, "--hourly-cost", min=0.0, show_default=False,
                                                help="Machine price per hour, for a cost estimate (default: none)."),
    output_tok_s: Optional[float] = typer.Option(None, "--output-tok-s", min=1e-9, show_default=False,
                                                 help="Output tokens per second to expect, e.g. from a small run's "
                                                      "stats.json or `bulkinfer bench`; with --hourly-cost gives "
                                                      "time and cost (default: none)."),
) -> int:
    config = JobConfig(model=model or "", input=input, output="", input_format=input_format,
                       prompt_column=prompt_column, messages_column=messages_column, max_tokens=max_tokens, n=n)
    sources = resolve_sources(config.input, config.input_format)
    check_columns(sources, config)
    renderer = PromptRenderer(config, model_tokenizer(model)) if model else None
    survey = _survey(sources, config, renderer)
    console = Console()
    console.print(_overview(sources, survey))
    console.print(histogram_table(length_bins(survey.lengths), "tokens" if model else "characters"))
    console.print(_estimate(survey, config, model is not None, hourly_cost, output_tok_s))
    return 0


def _survey(sources: list[Source], config: JobConfig, renderer: PromptRenderer | None) -> Survey:
    survey = Survey()
    rows = read_rows(scan_inputs(sources), RowSet(), WINDOW)
    for window in windows(rows, WINDOW):
        texts = list(_prompts(window, config, renderer, survey))
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
        reader = parquet_reader.columns if source.format == "parquet" else jsonl_reader.sample_columns
        table.add_row(f"columns of {source.name}", ", ".join(sorted(reader(source.path) or [])) or "none")
    return table


def _estimate(survey: Survey, config: JobConfig, in_tokens: bool, hourly_cost: float | None,
              output_tok_s: float | None) -> Table:
    table = Table(title="work estimate", title_justify="left", show_header=False, box=None, padding=(0, 1))
    unit = "tokens" if in_tokens else "characters (pass --model for tokens)"
    table.add_row("prompt", f"{sum(survey.lengths):,} {unit}")
    output_tokens = len(survey.lengths) * config.n * config.max_tokens
    table.add_row("output", f"at most {output_tokens:,} tokens ({config.n} x {config.max_tokens} per row)")
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
