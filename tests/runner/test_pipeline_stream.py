"""A pipeline's rows flow between stages a bounded batch at a time: exporting a pipeline over many rows
takes a small part of the memory that holding its rows would."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the pipeline's rows pass through pure Python three times: about a minute

PROBE = Path(__file__).with_name("pipeline_stream_probe.py")
ROWS = 400_000  # holding a stage of these takes about 190 MB; streaming them, a flat 30 MB or so


def _write_input(path: Path, rows: int) -> None:
    with open(path, "w") as out:
        for i in range(rows):
            out.write(json.dumps({"source_row": i // 4, "word": f"w{i % 97}", "n": i, "score": i * 7919 % 1000})
                      + "\n")


def _probe(mode: str, tmp_path: Path) -> dict:
    done = subprocess.run([sys.executable, str(PROBE), mode, str(tmp_path / "big.jsonl"),
                           str(tmp_path / "small.jsonl"), str(tmp_path / mode)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak resident memory is read from /proc")
def test_a_pipeline_over_many_rows_streams_in_bounded_memory(tmp_path: Path) -> None:
    _write_input(tmp_path / "big.jsonl", ROWS)
    _write_input(tmp_path / "small.jsonl", 1_000)
    streamed, held = _probe("stream", tmp_path), _probe("hold", tmp_path)
    sound = [i for i in range(ROWS) if i % 10 != 3]
    assert (streamed["rows"], held["rows"]) == (len({i // 4 for i in sound}), len(sound))
    assert streamed["growth_mb"] < held["growth_mb"] / 4, (streamed, held)
