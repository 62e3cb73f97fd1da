"""`bulkinfer run` on inputs in object storage (tests/s3_server.py): a store that cannot be reached is one
line and exit status 1, and storage_options, which may hold credentials, are written nowhere in the output."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
from cli_helpers import invoke
from runner_files import prompts, write_jsonl

FAST = ("--max-tokens", "2", "--temperature", "0", "--max-num-seqs", "4")


def _uploaded(s3_server, tmp_path: Path, key: str) -> str:
    url = s3_server.url(key)
    fs, path = fsspec.core.url_to_fs(url)
    fs.put_file(str(write_jsonl(tmp_path / "in.jsonl", prompts(3))), path)
    return url


def test_a_store_that_cannot_be_reached_is_one_line_and_exit_1(capsys, tiny_llama: Path, s3_server,
                                                               tmp_path: Path) -> None:
    url = _uploaded(s3_server, tmp_path, "down/in.jsonl")
    nowhere = {"endpoint_url": "http://127.0.0.1:9", "config_kwargs": {"retries": {"max_attempts": 1}}}
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", url, "--output", tmp_path / "out",
                          "--storage-options", json.dumps(nowhere), *FAST)
    assert code == 1 and err.count("\n") == 1 and "cannot be reached" in err, (code, err)


def test_storage_options_are_written_nowhere_in_the_output(capsys, tiny_llama: Path, s3_server,
                                                           tmp_path: Path) -> None:
    url = _uploaded(s3_server, tmp_path, "secret/in.jsonl")
    options = {"key": "testing", "secret": "a-secret-to-keep"}
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", url, "--output", tmp_path / "out",
                          "--storage-options", json.dumps(options), *FAST)
    assert code == 0, err
    written = [path for path in (tmp_path / "out").rglob("*") if path.is_file()]
    assert any(path.name == "stats.json" for path in written)
    assert not [path for path in written if b"a-secret-to-keep" in path.read_bytes()]


def test_status_and_export_reach_the_store_through_storage_options(capsys, monkeypatch, tiny_llama: Path,
                                                                   s3_server, tmp_path: Path) -> None:
    url = _uploaded(s3_server, tmp_path, "flagged/in.jsonl")
    out = s3_server.url("flagged/out")
    code, _, err = invoke(capsys, "run", "--model", tiny_llama, "--input", url, "--output", out, *FAST)
    assert code == 0, err
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the store's address comes from the flag alone
    store = ("--storage-options", json.dumps({"endpoint_url": s3_server.endpoint}))
    code, printed, err = invoke(capsys, "status", out, "--json", *store)
    assert code == 0 and json.loads(printed)["rows_done"] == 3, err
    code, _, err = invoke(capsys, "export", out, tmp_path / "results.jsonl", *store)
    assert code == 0, err
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3
    code, _, err = invoke(capsys, "status", out, "--storage-options", "[1]")
    assert code == 2 and err == "bulkinfer: error: storage_options must be a JSON object, got [1]\n"
