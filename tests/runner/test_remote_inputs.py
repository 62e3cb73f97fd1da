"""Inputs on object storage, read from a real S3-protocol server on localhost (moto's, tests/s3_server.py):
prefixes and globs work as directories do, a job's results are those of the same job on local files, an
object written again is a changed input, and reading streams an object rather than loading it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from runner_files import prompts, read_results, write_jsonl, write_parquet
from subprocess_job import SETTINGS, killed_and_resumed

from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.job import run_job
from bulkinfer.runner.readers import check_unchanged, count_rows
from bulkinfer.runner.sources import resolve_sources, scan_inputs

FAST = dict(max_tokens=3, temperature=0.0, max_num_seqs=4, window_rows=4, shard_rows=4)


def _upload(local: Path, url: str) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    fs.put(str(local), path, recursive=local.is_dir())


def _results(model: Path, inputs: list[str], out: Path) -> list[dict]:
    run_job(JobConfig.from_settings(model=str(model), input=inputs, output=str(out), **FAST))
    export_job(out, out.parent / f"{out.name}.parquet")
    return read_results(out.parent / f"{out.name}.parquet")


def test_a_job_on_s3_prefix_and_glob_gives_the_results_of_the_same_job_on_local_files(
        tiny_llama: Path, s3_server, tmp_path: Path) -> None:
    rows = prompts(14)
    local = tmp_path / "local"
    (local / "pq").mkdir(parents=True)
    (local / "js").mkdir()
    write_parquet(local / "pq" / "part-0.parquet", rows[:5], row_group_size=2)
    write_parquet(local / "pq" / "part-1.parquet", rows[5:8])
    write_jsonl(local / "js" / "a.jsonl", rows[8:11])
    write_jsonl(local / "js" / "b.jsonl", rows[11:])
    _upload(local, s3_server.url("same-job"))

    remote = _results(tiny_llama, [s3_server.url("same-job/pq/"), s3_server.url("same-job/js/*.jsonl")],
                      tmp_path / "remote")
    here = _results(tiny_llama, [str(local / "pq"), str(local / "js" / "*.jsonl")], tmp_path / "here")
    assert len(remote) == 14 and remote == here


def test_sources_on_s3_are_urls_in_sorted_order_hidden_objects_left_out(s3_server, tmp_path: Path) -> None:
    folder = tmp_path / "listing"
    folder.mkdir()
    for name in ("b.jsonl", "a.parquet", "_SUCCESS", ".hidden.jsonl", "notes.txt"):
        (folder / name).write_text('{"prompt": "x"}\n')
    _upload(folder, s3_server.url("listing"))
    sources = resolve_sources([s3_server.url("listing/")])
    assert [(s.path, s.format) for s in sources] == [
        (s3_server.url("listing/a.parquet"), "parquet"), (s3_server.url("listing/b.jsonl"), "jsonl")]


def test_an_object_written_again_is_a_changed_input(tiny_llama: Path, s3_server, tmp_path: Path) -> None:
    """Same size, same rows count, new bytes: only the ETag tells. A run in progress stops; a rerun is refused."""
    data = write_jsonl(tmp_path / "in.jsonl", prompts(6))
    url = s3_server.url("changed/in.jsonl")
    _upload(data, url)
    config = JobConfig.from_settings(model=str(tiny_llama), input=[url], output=str(tmp_path / "out"), **FAST)
    run_job(config)
    files = scan_inputs(resolve_sources([url]))

    data.write_text(data.read_text().replace("alpha", "ALPHA"))
    _upload(data, url)
    with pytest.raises(RunError, match="was written again"):
        check_unchanged(files)
    with pytest.raises(UsageError, match=r"changed \(version\)"):
        run_job(config)


def test_the_job_record_keeps_the_object_version(tiny_llama: Path, s3_server, tmp_path: Path) -> None:
    url = s3_server.url("record/in.jsonl")
    _upload(write_jsonl(tmp_path / "in.jsonl", prompts(3)), url)
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[url], output=str(tmp_path / "out"), **FAST))
    record = json.loads((tmp_path / "out" / "job.json").read_text())
    assert set(record["inputs"][0]) == {"path", "format", "size", "version", "rows"}
    assert record["inputs"][0]["path"] == url


# In a child process, so that the server's own copies (it runs in this one) do not count. Linux: the peak
# (VmHWM) is reset to the current size first, so that imports' peak does not hide the read's; one byte is read
# first, so that the store's client has made its first GET (botocore loads its models then) before the count.
_PEAK_GROWTH = """
import sys
from bulkinfer.runner.readers import count_rows
from bulkinfer.runner.sources import resolve_sources
from bulkinfer.runner.storage import open_object
def kib(name):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(name))
source = resolve_sources([sys.argv[1]])[0]
with open_object(sys.argv[1], None) as first:
    first.read(1)
open("/proc/self/clear_refs", "w").write("5")
before = kib("VmRSS:")
rows = count_rows(source)
print(rows, (kib("VmHWM:") - before) * 1024)
"""


def test_reading_a_large_object_holds_a_few_blocks_not_the_object(s3_server, tmp_path: Path) -> None:
    data = tmp_path / "big.jsonl"
    data.write_text((json.dumps({"prompt": "x" * 1000}) + "\n") * 48_000)  # 48 MB
    url = s3_server.url("big/big.jsonl")
    _upload(data, url)
    done = subprocess.run([sys.executable, "-c", _PEAK_GROWTH, url], capture_output=True, text=True, check=True,
                          env={**os.environ, **s3_server.env}, timeout=300)
    rows, growth = map(int, done.stdout.split())
    assert rows == 48_000
    assert growth < 16 << 20, f"peak memory grew {growth:,} bytes reading a {data.stat().st_size:,}-byte object"


def test_a_missing_bucket_is_a_usage_error(s3_server) -> None:
    with pytest.raises(UsageError, match="no such bucket"):
        resolve_sources(["s3://no-such-bucket/data/"])


def test_a_missing_object_is_a_usage_error(s3_server) -> None:
    with pytest.raises(UsageError, match="no such object"):
        resolve_sources([s3_server.url("nothing/here.jsonl")])


def test_a_store_that_cannot_be_reached_is_a_run_error(s3_server) -> None:
    """storage_options reach the filesystem: here an endpoint where nothing listens."""
    with pytest.raises(RunError, match="cannot be reached"):
        resolve_sources([s3_server.url("x/")], storage_options={"endpoint_url": "http://127.0.0.1:9",
                                                                 "config_kwargs": {"retries": {"max_attempts": 1}}})


def test_gs_without_gcsfs_names_the_extra_to_install() -> None:
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(UsageError, match=r"pip install 'bulkinfer\[gcs\]'"):
        resolve_sources(["gs://bucket/data/"])


@pytest.mark.slow
def test_a_job_reading_s3_killed_at_random_moments_resumes_to_the_results_of_a_local_run(
        tiny_llama: Path, s3_server, tmp_path: Path) -> None:
    data = write_parquet(tmp_path / "in.parquet", prompts(64), row_group_size=8)
    url = s3_server.url("killed/in.parquet")
    _upload(data, url)
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "here"),
                                    **SETTINGS))
    killed_and_resumed(tiny_llama, url, tmp_path / "remote", (), seed=3, kills=(1, 3))
    for out in ("here", "remote"):
        export_job(tmp_path / out, tmp_path / f"{out}.parquet")
    assert read_results(tmp_path / "remote.parquet") == read_results(tmp_path / "here.parquet")


def test_a_store_that_goes_down_is_a_run_error_and_back_up_serves_the_same_objects(s3_server,
                                                                                   tmp_path: Path) -> None:
    url = s3_server.url("down-and-up/in.jsonl")
    _upload(write_jsonl(tmp_path / "in.jsonl", prompts(3)), url)
    one_try = {"config_kwargs": {"retries": {"max_attempts": 1}}}
    s3_server.stop()
    try:
        with pytest.raises(RunError, match="cannot be reached"):
            resolve_sources([url], storage_options=one_try)
    finally:
        s3_server.start()
    assert count_rows(resolve_sources([url], storage_options=one_try)[0]) == 3
