"""`bulkinfer export` to object storage, against a real S3-protocol server on localhost (tests/s3_server.py):
what is read back is what a local export writes, and an export that fails leaves nothing under the name."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import fsspec
import pyarrow.parquet as pq
import pytest
from cli_helpers import invoke, one_line_error
from runner_files import committed_job

from bulkinfer.runner.destination import writing_object


def _job(root: Path) -> Path:
    rows = [{"row_index": i, "generated_text": f"text {i}", "error": None} for i in range(7)]
    return committed_job(root, [rows[4:], rows[:4]], rows_total=7)


def test_export_to_s3_reads_back_as_the_local_export(capsys, s3_server, tmp_path: Path) -> None:
    out = _job(tmp_path / "out")
    assert invoke(capsys, "export", out, tmp_path / "here.parquet")[0] == 0
    for name in ("results.parquet", "results.jsonl.gz"):
        code, _, err = invoke(capsys, "export", out, s3_server.url(f"exports/{name}"))
        assert code == 0, err
    fs, path = fsspec.core.url_to_fs(s3_server.url("exports/results.parquet"))
    with fs.open(path, "rb") as file:
        remote = pq.read_table(file)
    assert remote.equals(pq.read_table(tmp_path / "here.parquet"))
    with fs.open(path.replace(".parquet", ".jsonl.gz"), "rb") as file:
        lines = [json.loads(line) for line in gzip.decompress(file.read()).splitlines()]
    assert lines == remote.to_pylist()


def test_an_export_that_fails_leaves_the_object_as_it_was(s3_server) -> None:
    url = s3_server.url("exports/kept.jsonl")
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path, b"the old export\n")
    with pytest.raises(RuntimeError), writing_object(url, None) as file:
        file.write(b"half of a new export\n")
        file.flush(force=True)  # its bytes are on the server now, as a part of an upload
        assert fs.cat_file(path) == b"the old export\n"
        raise RuntimeError("the export failed")
    fs.invalidate_cache()
    assert fs.cat_file(path) == b"the old export\n"


def test_export_to_a_missing_bucket_is_one_line(capsys, tmp_path: Path, s3_server) -> None:
    code, _, err = invoke(capsys, "export", _job(tmp_path / "out"), "s3://no-such-bucket/results.parquet")
    assert "no such bucket" in one_line_error(code, err)
