"""Rows whose JSONL keys are all different (each key a column of its own): result files and export
stay within a bounded memory however many distinct keys there are."""

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from runner_files import committed_job

from bulkinfer.runner.outdir.commit import Committer
from bulkinfer.runner.outdir.ledger import Ledger, load_progress
from bulkinfer.runner.outdir.result_files import FILE_CELLS, ResultFiles
from bulkinfer.runner.rowset import RowSet

# Peak RSS from /proc (VmHWM): getrusage's would include the forking test process's, kept across exec.
MEASURE_EXPORT = """
import re, sys
from pathlib import Path
from bulkinfer.runner.export import export_job
export_job(Path(sys.argv[1]), Path(sys.argv[2]))
print(int(re.search(r"VmHWM:\\s+(\\d+) kB", Path("/proc/self/status").read_text())[1]) // 1024)
"""


def _row(index: int) -> dict:
    return {"row_index": index, "prompt": "p", f"key{index}": index, "generated_text": "g", "error": None}


def test_a_result_file_holds_a_bounded_number_of_values(tmp_path: Path) -> None:
    files = ResultFiles(tmp_path / "shards")
    files.directory.mkdir()
    committer = Committer(files, Ledger(tmp_path / "ledger.jsonl"), load_progress(tmp_path / "ledger.jsonl"),
                          RowSet(), max_rows=10_000, commit_seconds=float("inf"))
    for index in range(4_000):
        committer.add(_row(index))
        committer.commit_if_due()
    committer.commit()
    shapes = [pq.read_metadata(path) for path in sorted(files.directory.iterdir())]
    # the file is cut at the first row that reaches the limit
    assert len(shapes) > 1 and all(shape.num_rows * shape.num_columns < FILE_CELLS + shape.num_rows + shape.num_columns
                                   for shape in shapes)
    assert sum(shape.num_rows for shape in shapes) == 4_000


@pytest.mark.parametrize("keys, budget_mb", [(6_000, 400), pytest.param(20_000, 500, marks=pytest.mark.slow)])
def test_export_memory_does_not_grow_with_distinct_keys(tmp_path: Path, keys: int, budget_mb: int) -> None:
    rows = [_row(index) for index in range(keys)]
    files = [rows[start:start + 2_000] for start in range(0, keys, 2_000)]  # as the committer cuts them
    out = committed_job(tmp_path / "job", files, rows_total=keys)
    measured = subprocess.run([sys.executable, "-c", MEASURE_EXPORT, str(out), str(tmp_path / "out.parquet")],
                              capture_output=True, text=True, check=True)
    assert int(measured.stdout) < budget_mb
    last = pq.read_table(tmp_path / "out.parquet", columns=["row_index", f"key{keys - 1}"]).to_pylist()
    assert len(last) == keys and last[-1] == {"row_index": keys - 1, f"key{keys - 1}": keys - 1}
