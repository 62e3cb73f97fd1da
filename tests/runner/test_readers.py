import gzip
import os
from pathlib import Path

import pyarrow as pa
import pytest
from runner_files import write_jsonl, write_parquet

from bulkinfer.errors import RunError
from bulkinfer.runner.readers import read_rows, windows
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import resolve_sources, scan_inputs
from bulkinfer.runner.tasks import reserved_columns

GENERATE = reserved_columns("generate")


def _rows(paths: list[Path], done: RowSet | None = None, batch_rows: int = 3):
    files = scan_inputs(resolve_sources([str(p) for p in paths]))
    return files, list(read_rows(files, done or RowSet(), batch_rows, reserved=GENERATE))


def test_every_non_blank_line_is_one_row_and_bad_lines_say_where(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [
        {"prompt": "good"},
        "{not json",
        "[1, 2]",
        '"just a string"',
        b'{"prompt": "caf\xe9"}',
        {"prompt": "x", "error": "mine"},
        {"prompt": "last"},
    ], blank_every=2)
    files, rows = _rows([path])
    assert files[0].rows == 7
    assert [row.index for row in rows] == list(range(7))
    assert rows[0].values == {"prompt": "good"} and rows[0].error is None
    # Lines are counted physically (blank lines included), as an editor shows them.
    assert rows[1].error == "in.jsonl line 2: not valid JSON (Expecting property name enclosed in double quotes at column 2)"
    assert rows[2].error == "in.jsonl line 4: expected a JSON object, got an array"
    assert rows[3].error == "in.jsonl line 5: expected a JSON object, got a string"
    assert rows[4].error == "in.jsonl line 7: not valid UTF-8 (byte 0xe9 at offset 15)"
    assert rows[5].error == "in.jsonl line 8: has a key 'error', which is also an output column"
    assert rows[6].where == "in.jsonl line 10" and rows[6].error is None


def test_compressed_jsonl_streams(tmp_path: Path) -> None:
    gz = tmp_path / "in.jsonl.gz"
    with gzip.open(gz, "wt") as handle:
        handle.write('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    zst = tmp_path / "in.jsonl.zst"
    with pa.output_stream(str(zst), compression="zstd") as stream:
        stream.write(b'{"prompt": "c"}\n')
    files, rows = _rows([gz, zst])
    assert [f.rows for f in files] == [2, 1]
    assert [(r.index, r.values["prompt"]) for r in rows] == [(0, "a"), (1, "b"), (2, "c")]


def test_parquet_rows_continue_the_numbering_across_files(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "a0"}, {"prompt": "a1"}])
    second = write_parquet(tmp_path / "b.parquet", [{"prompt": f"b{i}", "n": i} for i in range(7)], row_group_size=2)
    files, rows = _rows([first, second])
    assert [f.rows for f in files] == [2, 7]
    assert [(r.index, r.values["prompt"]) for r in rows] == [(0, "a0"), (1, "a1")] + [(2 + i, f"b{i}") for i in range(7)]
    assert rows[4].where == "b.parquet row 3"


def test_done_rows_are_skipped_without_changing_positions(tmp_path: Path) -> None:
    jsonl = write_jsonl(tmp_path / "a.jsonl", [{"prompt": str(i)} for i in range(5)])
    parquet = write_parquet(tmp_path / "b.parquet", [{"prompt": str(i)} for i in range(6)])
    done = RowSet([0, 1, 2, 3, 4, 5, 6, 7, 9])  # all of a.jsonl, the first batch of b.parquet, and row 9
    _, rows = _rows([jsonl, parquet], done)
    assert [(r.index, r.values["prompt"]) for r in rows] == [(8, "3"), (10, "5")]


@pytest.mark.parametrize("count, size, expected", [(0, 3, []), (7, 3, [3, 3, 1]), (6, 3, [3, 3])])
def test_windows_split_the_stream(count: int, size: int, expected: list[int]) -> None:
    assert [len(window) for window in windows(iter(range(count)), size)] == expected


def test_lines_appended_to_a_file_being_read_are_not_rows_of_the_job(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [{"prompt": f"a{i}"} for i in range(3)])
    second = write_jsonl(tmp_path / "b.jsonl", [{"prompt": f"b{i}"} for i in range(3)])
    files = scan_inputs(resolve_sources([str(first), str(second)]))
    rows = read_rows(files, RowSet(), batch_rows=3, reserved=GENERATE)
    taken = [next(rows)]  # a.jsonl is open
    with open(first, "a") as handle:
        handle.write('{"prompt": "late"}\n')
    taken.extend(rows)
    assert [row.index for row in taken] == list(range(6))
    assert [row.values["prompt"] for row in taken] == ["a0", "a1", "a2", "b0", "b1", "b2"]


def test_a_file_cut_short_while_read_is_refused_not_read_short(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": f"p{i}"} for i in range(4)])
    files = scan_inputs(resolve_sources([str(path)]))
    mtime = path.stat().st_mtime_ns
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + " " * (len(lines[3]) - 1) + "\n")  # the last row blanked out
    os.utime(path, ns=(mtime, mtime))  # same size and time as recorded, yet a row short: the count decides
    with pytest.raises(RunError, match="holds 3 rows where the job recorded 4"):
        list(read_rows(files, RowSet(), batch_rows=3, reserved=GENERATE))



def test_a_compressed_file_cut_while_read_is_said_as_changed(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl.gz"
    with gzip.open(path, "wt") as handle:  # random text: it does not compress, so the file outgrows a read buffer
        handle.write("".join(f'{{"prompt": "{os.urandom(500).hex()}"}}\n' for _ in range(4000)))
    files = scan_inputs(resolve_sources([str(path)]))
    rows = read_rows(files, RowSet(), batch_rows=100, reserved=GENERATE)
    next(rows)  # the file is open, its first megabyte read
    with open(path, "r+b") as handle:  # in place, as a tool rewriting the file would leave it half way
        handle.truncate(path.stat().st_size // 2)
    with pytest.raises(RunError, match=r"in\.jsonl\.gz: shrank from .* bytes since the job started"):
        list(rows)
