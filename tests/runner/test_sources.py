from pathlib import Path

import pytest
from runner_files import write_jsonl, write_parquet

from bulkinfer.errors import UsageError
from bulkinfer.runner.sources import resolve_sources


def test_files_directories_and_globs_resolve_in_a_stable_order(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ["b.jsonl", "a.parquet", "sub/c.jsonl.gz", "_SUCCESS", ".hidden.jsonl", "notes.txt"]:
        (data / name).write_bytes(b"")
    (tmp_path / "more").mkdir()
    for name in ["z.jsonl", "y.jsonl.zst", "x.parquet"]:
        (tmp_path / "more" / name).write_bytes(b"")
    single = write_jsonl(tmp_path / "single.ndjson", [{"prompt": "x"}])
    sources = resolve_sources([str(single), str(data), str(tmp_path / "more" / "*.jsonl*")])
    assert [(Path(s.path).relative_to(tmp_path).as_posix(), s.format) for s in sources] == [
        ("single.ndjson", "jsonl"), ("data/a.parquet", "parquet"), ("data/b.jsonl", "jsonl"),
        ("data/sub/c.jsonl.gz", "jsonl"), ("more/y.jsonl.zst", "jsonl"), ("more/z.jsonl", "jsonl")]


def test_a_file_given_twice_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "x"}])
    with pytest.raises(UsageError, match="given twice"):
        resolve_sources([str(path), str(tmp_path / "*.jsonl")])


@pytest.mark.parametrize("spec, message", [
    ("missing.jsonl", "no such file or directory"),
    ("*.nothing", "no file matches"),
    ("empty_dir", "holds no .parquet or .jsonl"),
    ("data.csv", "cannot tell the format"),
])
def test_unusable_inputs_are_named(tmp_path: Path, spec: str, message: str) -> None:
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(UsageError, match=message):
        resolve_sources([str(tmp_path / spec)])


def test_input_format_overrides_the_extension(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "data.bin", [{"prompt": "x"}])
    assert resolve_sources([str(path)], "parquet")[0].format == "parquet"
