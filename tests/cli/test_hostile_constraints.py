"""A job whose rows each bring their own constraint, hostile or ordinary: every row that stops matches
its constraint, checked by code we did not write (Python's re, the jsonschema package, membership);
every other row is an error row with a reason, or cut by max_tokens. No row blocks the job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from cli_helpers import exported, invoke

TICKET = {"type": "object", "properties": {"label": {"enum": ["bug", "feature"]}, "urgent": {"type": "boolean"}},
          "required": ["label", "urgent"], "additionalProperties": False}
RECURSIVE_REF = {"$ref": "#/$defs/node", "$defs": {"node": {
    "type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}, "required": ["next"]}}}


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


# (param column, constraint, a Python regex that a grammar's sentences fully match, the error it must
# end in or None: then it must stop matching its constraint, or be cut by max_tokens)
TOO_MANY = "could not be followed: lexer error: too many expressions constructed"
NOTHING = "nothing this model can write matches it"
TOO_DEEP = "json_schema is nested more than 100 levels deep"
CASES = [
    ("regex", "(a{1000}){1000}", None, f"regex {TOO_MANY}"),
    ("regex", "((a{100}){100}){100}", None, f"regex {TOO_MANY}"),
    ("regex", "a{1000000}", None, f"regex {TOO_MANY}"),
    ("regex", "[^\\s\\S]", None, f"unsupported regex: {NOTHING}"),
    ("regex", "x[^\\s\\S]|y[^\\s\\S]", None, f"unsupported regex: {NOTHING}"),
    ("regex", "(a)\\1", None, "unsupported regex: "),  # a back-reference: not in Rust's syntax
    ("regex", "(" * 100_000 + ")" * 100_000, None, "unsupported regex: "),
    ("regex", "x{2,1}", None, "unsupported regex: "),
    ("regex", "[a-z]{2}[0-9]", None, None),
    ("regex", "(yes|no)", None, None),
    ("regex", "(a|b)*c{0,3}", None, None),
    ("json_schema", RECURSIVE_REF, None, "schema could not be followed: parser error: Too many items"),
    ("json_schema", _nested_schema(49), None, None),  # 99 levels: the deepest accepted
    ("json_schema", _nested_schema(50), None, TOO_DEEP),
    ("json_schema", '{"properties": ' + '{"a": ' * 985 + "{}" + "}" * 985 + "}", None, TOO_DEEP),
    ("json_schema", '{"type": "object", "properties": {"a": ' * 5000 + "{}" + "}}" * 5000, None, TOO_DEEP),
    ("json_schema", {"allOf": [{"type": "string"}, {"type": "integer"}]}, None, "unsupported schema: Unsatisfiable"),
    ("json_schema", {"type": "integer", "minimum": 5, "maximum": 1}, None, "unsupported schema: "),
    ("json_schema", {"type": "string", "pattern": "^[^\\s\\S]$"}, None, "unsupported schema: "),
    ("json_schema", {"enum": []}, None, "unsupported schema: "),
    ("json_schema", {"type": "string", "minLength": 100_000_000}, None, None),
    ("json_schema", TICKET, None, None),
    ("json_schema", {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, None, None),
    ("json_schema", {"enum": [f"v{i}" for i in range(5000)]}, None, None),
    ("choices", [f"label-{i}" for i in range(3000)], None, None),  # one rule per choice refused over 2,000
    ("choices", ["spam", "ham", 'q"x', "b\\s", "é😀"], None, None),
    ("grammar", 'root ::= root "a"', None, f"unsupported grammar: {NOTHING}"),  # left recursion, no way out
    ("grammar", "start: " + " | ".join(f'"w{i}"' for i in range(5000)), None,
     "grammar could not be followed: Parser Error: Current row has 5001 items"),
    ("grammar", 'root ::= "a', None, "unsupported grammar: "),
    ("grammar", "root ::= ", "", None),  # only the empty text
    ("grammar", 'start: start "a" | "b"', "ba*", None),  # left recursion with a way out
    ("grammar", 'root ::= "a"+ "b"', "a+b", None),
    ("grammar", 'start: "yes" | "no"', "yes|no", None),
]
COLUMNS = ("regex", "json_schema", "choices", "grammar")


def test_every_stop_row_matches_its_constraint(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    # Schemas as JSON text: the input's columns are kept in the results, and Parquet refuses to read
    # back a column nested 100 deep.
    rows = [{"prompt": f"row {index}", **{name: None for name in COLUMNS},
             column: json.dumps(value) if column == "json_schema" and not isinstance(value, str) else value}
            for index, (column, value, _, _) in enumerate(CASES * 2)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    columns = [arg for name in COLUMNS for arg in ("--param-column", f"{name}={name}")]
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", source, "--output", tmp_path / "out",
                          "--max-tokens", "16", "--temperature", "1.0", "--seed", "3", *columns)
    assert code == 0, err
    results = exported(capsys, tmp_path / "out")
    assert len(results) == len(rows)
    stopped = 0
    for (column, value, sentence, reason), result in zip(CASES * 2, results):
        where = (column, str(value)[:60], result["error"], result["generated_text"])
        if reason is not None or result["error"] is not None:
            assert reason is not None and reason in (result["error"] or ""), where
            assert len(result["error"]) < 500, where  # the reason, not the whole constraint again
        elif result["finish_reason"] == "stop":
            _check(column, value, sentence, result["generated_text"])
            stopped += 1
        else:
            assert result["finish_reason"] == "length", where
    assert stopped >= 20  # the checks above ran on most ordinary rows, not on none


def _check(column: str, value, sentence: str | None, text: str) -> None:
    if column == "regex":
        assert re.fullmatch(value, text), (value, text)
    elif column == "json_schema":
        jsonschema.validate(json.loads(text), value)
    elif column == "choices":
        assert text in value, text
    else:
        assert re.fullmatch(sentence, text), (value, text)
