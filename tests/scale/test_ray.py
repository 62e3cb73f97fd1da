"""The Ray executor and processor on a real local Ray cluster on the CPU: results equal a plain run's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bulkinfer.cli import main
from bulkinfer.integrations.ray_job import RayExecutor, RaySettings
from bulkinfer.runner import JobConfig, UsageError, export_job, run_job
from runner_files import committed, prompts, read_results, write_jsonl, write_parquet

pytestmark = pytest.mark.slow  # starts a local Ray cluster

SETTINGS = dict(max_tokens=4, temperature=0.0, max_num_seqs=8, window_rows=6, shard_rows=5)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def data(tmp_path: Path) -> list[str]:
    rows = prompts(20)
    return [str(write_jsonl(tmp_path / "a.jsonl", rows[:9] + ["not json"])),
            str(write_parquet(tmp_path / "b.parquet", rows[9:]))]


def _exported(out: Path) -> list[dict]:
    destination = out.with_name(f"{out.name}.parquet")
    export_job(out, destination)
    return read_results(destination)


def test_a_ray_job_equals_a_local_one_and_resumes(ray_cluster, tmp_path: Path, tiny_llama: Path,
                                                  data: list[str]) -> None:
    plain = _exported(run_job(JobConfig.from_settings(model=str(tiny_llama), input=data, output=str(tmp_path / "plain"),
                                                      **SETTINGS)).output)
    out = tmp_path / "ray"
    outcome = run_job(JobConfig.from_settings(model=str(tiny_llama), input=data, output=str(out), **SETTINGS),
                      executor=RayExecutor(RaySettings(replicas=2)))
    assert (outcome.rows_done, outcome.rows_failed) == (21, 1)
    assert _exported(out) == plain

    # Keep only the job record and the first commit, as if the driver had died after it; the rerun does the rest.
    ledger = out / "ledger.jsonl"
    kept = ledger.read_bytes().splitlines(keepends=True)[:2]
    ledger.write_bytes(b"".join(kept))
    first = committed(ledger)[0].rows
    flags = ["--model", str(tiny_llama), "--output", str(out), "--executor", "ray", "--replicas", "1"]
    flags += [part for path in data for part in ("--input", path)]
    flags += [part for name, value in SETTINGS.items() for part in ("--" + name.replace("_", "-"), str(value))]
    with pytest.raises(SystemExit) as exited:
        main(["run", *flags])
    assert exited.value.code == 0
    assert sum(commit.rows for commit in committed(ledger)) == 21 and first < 21
    assert _exported(out) == plain


def test_the_processor_in_a_users_own_pipeline(ray_cluster, tmp_path: Path, tiny_llama: Path) -> None:
    from bulkinfer.integrations.ray import LLMProcessor

    rows = prompts(12)
    data = write_jsonl(tmp_path / "in.jsonl", rows)
    config = JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "out"), **SETTINGS)
    out = run_job(config).output
    expected = {row["k"]: row["generated_text"] for row in _exported(out)}
    dataset = ray_cluster.data.from_items(rows).map_batches(
        LLMProcessor, fn_constructor_kwargs={"model": str(tiny_llama), "max_tokens": 4, "temperature": 0.0},
        compute=ray_cluster.data.ActorPoolStrategy(size=1), batch_size=5, batch_format="pyarrow")
    results = dataset.take_all()
    assert {row["k"]: row["generated_text"] for row in results} == expected
    assert all(row["error"] is None and row["finish_reason"] for row in results)


def test_without_ray_the_executor_says_how_to_install_it(monkeypatch, tmp_path: Path, tiny_llama: Path,
                                                        data: list[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    config = JobConfig.from_settings(model=str(tiny_llama), input=data, output=str(tmp_path / "out"))
    with pytest.raises(UsageError, match=r"pip install 'bulkinfer\[ray\]'"):
        run_job(config, executor=RayExecutor())
