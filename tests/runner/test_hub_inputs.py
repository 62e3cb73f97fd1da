"""hf://datasets/... inputs with HF_HUB_OFFLINE set, read from a local Hub cache laid out as huggingface_hub
lays it out (refs/, snapshots/<commit>/ links to blobs/<oid>): the Hub itself is not reachable here."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from runner_files import prompts, write_jsonl, write_parquet

from bulkinfer.errors import UsageError
from bulkinfer.runner.readers import read_rows
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.sources import resolve_sources, scan_inputs

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache_dataset(cache: Path, repo: str, files: dict[str, Path]) -> None:
    """`files` by their path in the dataset, stored as the cache stores a download of main."""
    root = cache / f"datasets--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(COMMIT)
    (root / "blobs").mkdir()
    for name, local in files.items():
        oid = hashlib.sha256(local.read_bytes()).hexdigest()
        (root / "blobs" / oid).write_bytes(local.read_bytes())
        link = root / "snapshots" / COMMIT / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(root / "blobs" / oid, link.parent))


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_a_cached_dataset_reads_by_its_hub_url_with_its_blob_as_version(hub_cache: Path, tmp_path: Path) -> None:
    rows = prompts(7)
    _cache_dataset(hub_cache, "org/name", {
        "data/train-0.parquet": write_parquet(tmp_path / "a.parquet", rows[:4]),
        "data/train-1.jsonl": write_jsonl(tmp_path / "b.jsonl", rows[4:]),
        "README.md": write_jsonl(tmp_path / "readme", [])})
    sources = resolve_sources(["hf://datasets/org/name/data/"])
    assert [s.path for s in sources] == ["hf://datasets/org/name/data/train-0.parquet",
                                         "hf://datasets/org/name/data/train-1.jsonl"]
    files = scan_inputs(sources)
    assert files[0].version == hashlib.sha256((tmp_path / "a.parquet").read_bytes()).hexdigest()
    read = [row.values for row in read_rows(files, RowSet(), 3, reserved=())]
    assert read == rows


def test_a_dataset_not_in_the_cache_is_one_line(hub_cache: Path) -> None:
    with pytest.raises(UsageError, match="not in the Hub cache"):
        resolve_sources(["hf://datasets/org/missing/data/"])
