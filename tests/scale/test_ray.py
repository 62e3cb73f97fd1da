"""The Ray executor and processor on a real local Ray cluster on the CPU: results equal a plain run's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bulkinfer.cli import main
from bulkinfer.integrations.ray_job import RayExecutor, RaySettings
from bulkinfer.runner import JobConfig, UsageError, export_job, run_job
from lora_adapters import make_adapter
from runner_files import committed, prompts, read_results, write_jsonl, write_parquet
from safetensors.torch import load_file, save_file

pytestmark = pytest.mark.slow  # starts a local Ray cluster

SETTINGS = dict(dtype="float32", max_tokens=4, temperature=0.0, max_num_seqs=8, window_rows=6, shard_rows=5)


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
        LLMProcessor, fn_constructor_kwargs={"model": str(tiny_llama), "max_tokens": 4, "temperature": 0.0,
                               "dtype": "float32"},
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


@pytest.fixture(scope="module")
def adapter(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_adapter(tiny_llama, tmp_path_factory.mktemp("ray-adapters") / "sql", rank=4, seed=5)


def test_a_ray_job_with_adapters_per_row_equals_a_local_one(ray_cluster, tmp_path: Path, tiny_llama: Path,
                                                            adapter: Path) -> None:
    rows = [{**row, "adapter": ["sql", "base"][index % 2]} for index, row in enumerate(prompts(6))]
    data = [str(write_jsonl(tmp_path / "in.jsonl", rows))]
    settings = dict(model=str(tiny_llama), input=data, lora={"sql": str(adapter)}, param_columns={"lora": "adapter"},
                    **SETTINGS)
    plain = _exported(run_job(JobConfig.from_settings(output=str(tmp_path / "plain"), **settings)).output)
    out = run_job(JobConfig.from_settings(output=str(tmp_path / "ray"), **settings),
                  executor=RayExecutor(RaySettings(replicas=1))).output
    assert _exported(out) == plain and not any(row["error"] for row in plain)


def test_an_adapter_that_does_not_fit_the_model_stops_a_ray_job_in_one_line(capsys, ray_cluster, tmp_path: Path,
                                                                            tiny_llama: Path, adapter: Path) -> None:
    misfit = tmp_path / "misfit"
    misfit.mkdir()
    (misfit / "adapter_config.json").write_bytes((adapter / "adapter_config.json").read_bytes())
    tensors = load_file(str(adapter / "adapter_model.safetensors"))  # layer 0's updates, moved to a layer not there
    save_file({name.replace("layers.0.", "layers.9."): tensor for name, tensor in tensors.items() if "layers.0." in name},
              str(misfit / "adapter_model.safetensors"))
    data = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "x", "adapter": "sql"}])
    with pytest.raises(SystemExit) as exited:
        main(["run", "--model", str(tiny_llama), "--input", str(data), "--output", str(tmp_path / "out"),
              "--lora", f"sql={misfit}", "--param-column", "lora=adapter", "--executor", "ray", "--max-tokens", "2"])
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2 and err[-1].startswith("bulkinfer: error: --lora sql: LoRA adapter "), err[-3:]
    assert ": layer 9 " in err[-1] and err[-1].endswith("is not a projection of this model that takes an adapter")
