"""Structured outputs in jobs: a schema file, a regex, choices, and a schema per row from a column."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from cli_helpers import exported, invoke, one_line_error

TICKET = {"type": "object", "properties": {"label": {"enum": ["bug", "feature"]}, "urgent": {"type": "boolean"}},
          "required": ["label", "urgent"], "additionalProperties": False}


def _input(tmp_path: Path, rows: list[dict]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _run(capsys, tmp_path: Path, model: Path, rows: list[dict], *flags: str) -> list[dict]:
    code, _, err = invoke(capsys, "run", "--model", model, "--input", _input(tmp_path, rows), "--output",
                          tmp_path / "out", "--max-tokens", "32", "--temperature", "0.8", "--seed", "1", *flags)
    assert code == 0, err
    return exported(capsys, tmp_path / "out")


def test_a_schema_file_makes_every_row_valid_json(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    schema_file = tmp_path / "ticket.json"
    schema_file.write_text(json.dumps(TICKET))
    rows = _run(capsys, tmp_path, tiny_llama, [{"prompt": f"ticket {i}"} for i in range(6)],
                "--json-schema", schema_file)
    for row in rows:
        assert row["finish_reason"] == "stop"
        value = json.loads(row["generated_json"])
        jsonschema.validate(value, TICKET)
        assert value == json.loads(row["generated_text"])


def test_regex_and_choices_from_flags(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    rows = _run(capsys, tmp_path / "a", tiny_llama, [{"prompt": f"code {i}"} for i in range(4)],
                "--regex", r"[a-z]{2}[0-9]")
    assert all(re.fullmatch(r"[a-z]{2}[0-9]", row["generated_text"]) for row in rows), rows
    assert "generated_json" not in rows[0]
    rows = _run(capsys, tmp_path / "b", tiny_llama, [{"prompt": f"sort {i}"} for i in range(4)],
                "--choices", "spam", "--choices", "ham")
    assert {row["generated_text"] for row in rows} <= {"spam", "ham"}


def test_a_schema_per_row_and_its_error_rows(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    schemas = [TICKET, json.dumps({"type": "array", "items": {"type": "integer"}, "maxItems": 2}), "{oops",
               {"type": "strin"}, None]
    rows = _run(capsys, tmp_path, tiny_llama, [{"prompt": f"row {i}", "schema": s} for i, s in enumerate(schemas)],
                "--param-column", "json_schema=schema")
    assert rows[0]["error"] is None and set(json.loads(rows[0]["generated_json"])) == {"label", "urgent"}
    assert rows[1]["error"] is None
    if rows[1]["finish_reason"] == "stop":
        assert all(isinstance(item, int) for item in json.loads(rows[1]["generated_json"]))
    assert "json_schema is not valid JSON" in rows[2]["error"]
    assert "unsupported schema: " in rows[3]["error"]
    assert rows[4]["error"] is None and rows[4]["generated_json"] is None  # no schema: free text


def test_a_missing_schema_file_is_a_one_line_error(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", _input(tmp_path, [{"prompt": "x"}]),
                          "--output", tmp_path / "out", "--json-schema", tmp_path / "nope.json")
    assert "json_schema: no such file" in one_line_error(code, err)
