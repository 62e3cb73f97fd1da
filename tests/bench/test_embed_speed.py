"""benchmarks/embed_speed.py on a tiny model and a handful of texts: its report, and the agreement it checks
before it times anything."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "embed_speed.py"


def _script_module():
    spec = importlib.util.spec_from_file_location("embed_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_texts_spread_between_16_and_512_tokens_and_repeat_with_their_seed() -> None:
    embed_speed = _script_module()
    texts = embed_speed.make_texts(400, seed=3)
    lengths = np.array([len(text) for text in texts])  # the bench tokenizer: one token per character
    assert lengths.min() == 16 and lengths.max() == 512
    assert 64 < np.median(lengths) < 256  # most are short, as in real corpora
    assert texts == embed_speed.make_texts(400, seed=3)
    assert texts != embed_speed.make_texts(400, seed=4)


def test_the_report_times_both_systems_after_they_agree(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--shape", "tiny", "--texts", "6", "--repeats", "2",
                           "--threads", "1", "--job", "--profile", "--store", str(tmp_path / "store"),
                           "--output", str(report_path)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text())
    assert report["torch_threads"] == 1 and report["texts"] == 6
    assert {"platform", "cpus", "load_average", "load_average_at_start"} <= report["machine"].keys()
    assert report["command"].startswith("python benchmarks/embed_speed.py --shape tiny")
    [run] = report["runs"]
    assert run["dtype"] == "float32" and run["agreement_max_abs"] <= 1e-4
    assert run["tokens"] == sum(len(text) for text in _script_module().make_texts(6, seed=0))
    for timing in run["systems"].values():
        assert len(timing["warm_seconds"]) == 2
        assert timing["warm_tok_s"] == pytest.approx(run["tokens"] / min(timing["warm_seconds"]), rel=0.01)
    assert run["bulkinfer_over_sentence_transformers"] == pytest.approx(
        run["systems"]["bulkinfer"]["warm_tok_s"] / run["systems"]["sentence-transformers"]["warm_tok_s"], rel=0.01)
    assert run["job"]["tok_s"] > 0 and "--task embed" in run["job"]["command"]
    splits = run["profile"]["systems"]
    assert all(split["matmul_seconds"] > 0 and split["attention_seconds"] > 0 and split["other_seconds"] > 0
               for split in splits.values())
    ours = splits["bulkinfer"]
    assert run["profile"]["ratio_ceiling"] == pytest.approx(
        sum(splits["sentence-transformers"].values()) / (ours["matmul_seconds"] + ours["attention_seconds"]), rel=0.01)


def test_systems_that_disagree_are_not_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    embed_speed = _script_module()
    path = embed_speed.embedding_model("tiny", "mean", tmp_path)
    monkeypatch.setitem(embed_speed.TOLERANCE, "float32", 0.0)  # no difference at all is allowed
    with pytest.raises(SystemExit, match="disagree"):
        embed_speed.compare_in_process(path, embed_speed.make_texts(4, seed=0), "float32", repeats=1)
