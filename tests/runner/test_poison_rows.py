"""A row that breaks a reader, the tokenizer or the result writer becomes that row's error row, and the
job goes on; rerunning it never crashes again. Each poison is tried at line 1, 151 and 10,000."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runner_files import read_results
from transformers import AutoTokenizer

from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.outdir.result_files import ResultFiles
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.base import EngineFacts
from bulkinfer.runner.tasks.generate import GenerateTask

LINES = 10_000
POISONED = (1, 151, 10_000)  # line numbers, from 1
GOOD = (2, 150, 152, 9_999)  # rows beside them that must still run
SETTINGS = dict(max_tokens=2, temperature=0.0, max_num_seqs=8, window_rows=2_000, shard_rows=4_000)
POISONS = {
    "deep": ('{"prompt": "1+1=", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply to read"),
    "digits": ('{"prompt": "1+1=", "n": ' + "7" * 5_000 + "}", "not readable JSON (Exceeds the limit"),
    "surrogate-prompt": ('{"prompt": "1+\\ud800="}', "holds a lone surrogate"),
    "surrogate-column": ('{"prompt": "1+1=", "note": "a\\udfffb"}', "holds a lone surrogate"),
}


def _lines(poison: str) -> list[str]:
    """Empty prompts (error rows that cost no inference) but for the good rows and the poisoned ones."""
    lines = ['{"prompt": ""}'] * LINES
    for number in GOOD:
        lines[number - 1] = json.dumps({"prompt": f"{number}+1="})
    for number in POISONED:
        lines[number - 1] = poison
    return lines


def _run(tmp_path: Path, model: Path, data: Path) -> list[dict]:
    config = JobConfig.from_settings(model=str(model), input=[str(data)], output=str(tmp_path / "out"), **SETTINGS)
    outcome = run_job(config)
    assert outcome.complete and outcome.rows_total == LINES
    assert run_job(config).complete  # a rerun finds it complete: nothing crashes again
    export_job(tmp_path / "out", tmp_path / "out.parquet")
    return read_results(tmp_path / "out.parquet")


def _check(rows: list[dict], message: str, where: str) -> None:
    assert len(rows) == LINES
    for number in POISONED:
        error = rows[number - 1]["error"]
        assert error.startswith(f"in.{where} {number}: ") and message in error, error
    for number in GOOD:
        assert rows[number - 1]["error"] is None and rows[number - 1]["generated_text"] is not None


@pytest.mark.parametrize("poison", POISONS, ids=list(POISONS))
def test_a_poisoned_jsonl_line_is_its_own_error_row(tmp_path: Path, tiny_llama: Path, poison: str) -> None:
    line, message = POISONS[poison]
    data = tmp_path / "in.jsonl"
    data.write_text("\n".join(_lines(line)) + "\n")
    _check(_run(tmp_path, tiny_llama, data), message, "jsonl line")


def test_parquet_text_that_is_not_utf8_is_its_own_error_row(tmp_path: Path, tiny_llama: Path) -> None:
    prompts = [json.loads(line)["prompt"].encode() for line in _lines('{"prompt": ""}')]
    for number in POISONED:
        prompts[number - 1] = b"1+\xed\xa0\x80="  # what another writer may put in a string column
    data = tmp_path / "in.parquet"
    pq.write_table(pa.table({"prompt": pa.array(prompts, pa.binary()).view(pa.string())}), data)
    _check(_run(tmp_path, tiny_llama, data), "a text column holds bytes that are not valid UTF-8", "parquet row")


def test_text_the_tokenizer_fails_on_fails_only_its_row(tiny_llama: Path) -> None:
    config = JobConfig.from_settings(model="m", input=["i"], output="o", max_tokens=4)
    requests = GenerateTask(config, EngineFacts(AutoTokenizer.from_pretrained(tiny_llama), 64)).prepare
    rows = [SourceRow(0, {"prompt": "1+1="}, "line 1"), SourceRow(1, {"prompt": "1+\ud800="}, "line 2"),
            SourceRow(2, {"prompt": "2+2="}, "line 3")]
    prepared = requests(rows)
    assert sorted(work.row.index for work in prepared.work) == [0, 2]
    [failure] = prepared.failures
    assert failure.row.index == 1 and failure.error.startswith("line 2: the tokenizer failed on the prompt")


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


# Parquet writes a value 60 lists deep, then cannot read it back; beside text it would be text itself.
@pytest.mark.parametrize("fmt,fine,poison", [("parquet", "fine", "a\udfffb"), ("jsonl", "fine", "a\udfffb"),
                                             ("parquet", None, _nested(60))])
def test_a_row_the_writer_cannot_hold_is_written_as_an_error_row(tmp_path: Path, fmt: str, fine, poison) -> None:
    files = ResultFiles(tmp_path, fmt)
    rows = [{"row_index": 0, "note": fine, "error": None}, {"row_index": 1, "note": poison, "error": None}]
    written = files.write(1, rows)
    assert written.errors == 1
    back = files.read_range(written.name, 0, 2).to_pylist()
    assert back[0]["note"] == fine and back[0]["error"] is None and back[1]["note"] is None
    assert back[1]["error"].startswith("row 1: its values cannot be written")


_PEAK = """
import resource, sys
from bulkinfer.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    assert exit.code == 0, exit.code
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_a_50_mb_prompt_is_refused_without_tokenizing_it(tmp_path: Path, tiny_llama: Path) -> None:
    lines = [json.dumps({"prompt": f"{i}+1="}) for i in range(100)]
    (tmp_path / "small.jsonl").write_text("\n".join(lines) + "\n")
    huge = json.dumps({"prompt": "12+" * (50_000_000 // 3)})
    (tmp_path / "big.jsonl").write_text("\n".join(lines[:50] + [huge] + lines[50:]) + "\n")
    peaks = {}
    for name in ("small", "big"):
        run = ["run", "--model", str(tiny_llama), "--input", str(tmp_path / f"{name}.jsonl"),
               "--output", str(tmp_path / name), "--max-tokens", "2", "--temperature", "0"]
        result = subprocess.run([sys.executable, "-c", _PEAK, *run], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        peaks[name] = int(result.stdout.splitlines()[-1]) * 1024
    assert peaks["big"] - peaks["small"] < 300e6, peaks
    export_job(tmp_path / "big", tmp_path / "big.parquet")
    error = read_results(tmp_path / "big.parquet")[50]["error"]
    assert error.startswith("big.jsonl line 51: prompt is 49,999,998 characters; more than 16 x max_model_len")
