"""A pipeline stage's transforms on known tables: the filter language (and what it refuses), templates,
explode, rank_by/keep_top and dedup, each over rows in batches; and a stage's input table."""

import json
import math
from pathlib import Path

import pytest

from bulkinfer.errors import UsageError
from bulkinfer.runner.pipeline.dedup import Dedup, dedup
from bulkinfer.runner.pipeline.expression import Expression, RowError
from bulkinfer.runner.pipeline.rows import table_is_current, write_table
from bulkinfer.runner.pipeline.templates import MessagesTemplate, Template
from bulkinfer.runner.pipeline.transforms import explode, keep_top, keep_where


@pytest.mark.parametrize("text, row, expected", [
    ("reward > 0.5", {"reward": 0.7}, True),
    ("1 < x <= 3", {"x": 3}, True),
    ("1 < x <= 3", {"x": 4}, False),
    ("label in ['good', 'fine'] and not (n * 2 - 1 > 5)", {"label": "fine", "n": 3}, True),
    ("label not in ('good',) or n // 2 % 2 == 1", {"label": "good", "n": 6}, True),
    ("-x == -2.5 and x / 2 == 1.25", {"x": 2.5}, True),
    ("a + b == 'xy'", {"a": "x", "b": "y"}, True),
    ("x == None or x > 3", {"x": None}, True),  # `or` short-circuits like Python's
])
def test_filter_expressions(text, row, expected) -> None:
    assert Expression(text).holds(row) is expected


@pytest.mark.parametrize("text", [
    "__import__('os').system('touch /tmp/owned')",
    "().__class__",
    "open('/etc/passwd')",
    "x.real > 0",
    "x[0] == 1",
    "(lambda: 1)() == 1",
    "[y for y in x] == []",
    "f'{x}' == '1'",
    "_hidden > 1",
    "x in y",
    "x ** 2 > 1",
    "x if y else z",
    "x := 1",
    "import os",
])
def test_a_filter_that_would_run_code_is_refused_in_one_line(text) -> None:
    with pytest.raises(UsageError) as refused:
        Expression(text)
    assert "\n" not in str(refused.value) and str(refused.value).startswith("filter ")


def test_a_filter_that_cannot_evaluate_on_a_row_makes_it_an_error_row() -> None:
    rows = [{"x": 5}, {"y": 1}, {"x": "text"}, {"x": 1}, {"x": 9, "error": "earlier failure"}]
    kept = keep_where(rows, Expression("x * 2 > 4"))
    assert kept[0] == {"x": 5}
    assert kept[1]["error"] == "filter: no column 'x'"
    assert "needs numbers" in kept[2]["error"]  # "text" * 2 is not run through
    assert kept[3] == {"x": 9, "error": "earlier failure"}  # an error row passes through untouched
    assert len(kept) == 4
    with pytest.raises(RowError):
        Expression("x > 1").holds({"x": None})


def test_templates_render_columns_and_name_a_missing_one() -> None:
    template = Template("Rate this answer from 1 to 10: {generated_text} ({{braces}})", "prompt_template")
    assert template.render({"generated_text": "42"}) == "Rate this answer from 1 to 10: 42 ({braces})"
    with pytest.raises(ValueError, match="no column 'generated_text'"):
        template.render({"prompt": "x"})
    with pytest.raises(ValueError, match="no value in 'generated_text'"):
        template.render({"generated_text": None})
    chat = MessagesTemplate([{"role": "system", "content": "Judge."}, {"role": "user", "content": "Q: {q}"}])
    assert chat.render({"q": "2+2"}) == [{"role": "system", "content": "Judge."}, {"role": "user", "content": "Q: 2+2"}]


@pytest.mark.parametrize("text", ["{x.__class__}", "{x[0]}", "{x!r}", "{x:>10}", "{0}", "{}", "{x"])
def test_a_template_placeholder_must_be_a_column_name(text) -> None:
    with pytest.raises(UsageError):
        Template(text, "prompt_template")


def test_explode_then_keep_top_is_best_of_n() -> None:
    rows = [{"source_row": 0, "p": "a", "generated_text": ["a0", "a1", "a2"], "finish_reason": ["stop"] * 3},
            {"source_row": 1, "p": "b", "generated_text": None, "finish_reason": None, "error": "too long"},
            {"source_row": 2, "p": "c", "generated_text": ["c0", "c1"], "finish_reason": ["stop", "length"]}]
    exploded = explode(rows, ["generated_text", "finish_reason"])
    assert [(row["source_row"], row.get("output_index"), row["generated_text"]) for row in exploded] == [
        (0, 0, "a0"), (0, 1, "a1"), (0, 2, "a2"), (1, None, None), (2, 0, "c0"), (2, 1, "c1")]
    assert exploded[5]["finish_reason"] == "length"
    for row, reward in zip(exploded, [0.1, 0.9, 0.5, None, None, -1.0]):
        row["reward"] = reward
    for size in (1, 2, 4, 6):  # a source row's rows split across batches are ranked together
        batches = [exploded[start:start + size] for start in range(0, len(exploded), size)]
        best = _rows(keep_top(batches, "reward", 1))
        assert [(row["source_row"], row.get("output_index")) for row in best] == [(0, 1), (1, None), (2, 1)]
        two = _rows(keep_top(batches, "reward", 2))
        assert [(row["source_row"], row.get("output_index")) for row in two] == [
            (0, 1), (0, 2), (1, None), (2, 0), (2, 1)]


def test_dedup_drops_rows_near_an_earlier_kept_row_whatever_the_block_and_batch_sizes() -> None:
    def at(degrees: float) -> list[float]:
        return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]

    angles = [0, 5, 90, 3, 40, 93, 180, 41, 200]
    rows = [{"i": i, "embedding": at(angle)} for i, angle in enumerate(angles)]
    rows.insert(4, {"i": "missing", "embedding": None})
    rule = Dedup.from_table({"column": "embedding", "threshold": math.cos(math.radians(10))})
    for block, batch in [(1, 1), (2, 3), (3, 2), (1024, 4), (1024, 1024)]:
        kept = _rows(dedup([rows[start:start + batch] for start in range(0, len(rows), batch)], rule, block))
        assert [row["i"] for row in kept if row.get("error") is None] == [0, 2, 4, 6, 8]
        assert [row["i"] for row in kept if row.get("error")] == ["missing"]
    with pytest.raises(UsageError):
        Dedup.from_table({"column": "embedding", "threshold": 2})


def _rows(batches) -> list[dict]:
    return [row for batch in batches for row in batch]


def test_a_stage_input_table_has_every_batch_columns_on_every_line(tmp_path: Path) -> None:
    # A key first seen in a later batch is still a column of the first lines: the job samples lines for
    # its columns, so every line has the same keys.
    batches = [[{"source_row": 0, "a": 1}], [{"source_row": 1, "b": "x"}]]
    table = tmp_path / "input-table.jsonl"
    write_table(table, lambda: iter(batches), "0" * 32)
    lines = [json.loads(line) for line in table.read_text().splitlines()]
    assert lines == [{"source_row": 0, "a": 1, "b": None}, {"source_row": 1, "a": None, "b": "x"}]
    assert table_is_current(table, "0" * 32)
