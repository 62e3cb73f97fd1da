"""The command line: one-line usage errors with exit 2, and run/status/export wired to the runner."""

import json
from pathlib import Path

import pytest
from runner_files import committed, prompts, read_results, write_jsonl

from bulkinfer.cli import main


def _main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "in.jsonl", prompts(4) + ["not json"])


@pytest.mark.parametrize("arguments, message", [
    (["--temperature", "warm"], "Invalid value for '--temperature'"),
    (["--bogus"], "No such option: --bogus"),
    (["--truncate", "middle"], "truncate must be one of left, right, got 'middle'"),
    (["--temperature", "-1"], "bad sampling setting: temperature must be >= 0, got -1.0"),
    (["--param-column", "max_tokens"], "--param-column 'max_tokens': expected PARAM=COLUMN"),
    (["--param-column", "dtype=x"], "param_columns: dtype cannot be set per row"),
    (["--prompt-column", "text"], "in.jsonl: no column 'text' (from prompt_column); its columns are: k, prompt"),
    (["--output", "/proc/no/such/place"], "/proc/no/such/place: cannot create the output directory"),
    (["--input", "missing.jsonl"], "missing.jsonl: no such file or directory"),
    (["--model", "/no/such/model"], "/no/such/model: no such model directory"),
    (["--attention-backend", "fast"], "attention_backend must be one of"),  # refused by the engine itself
    # Job-wide sampling values that every row would fail with, refused before anything is written.
    (["--temperature", "nan"], "bad sampling setting: temperature must be a finite number, got nan"),
    (["--top-p", "inf"], "bad sampling setting: top_p must be a finite number, got inf"),
    (["--seed", "1e23"], "Invalid value for '--seed'"),
    (["--seed", str(2**80)], f"seed must be in [-2**63, 2**64 - 1] (64 bits), got {2**80}"),
    (["--engine-seed", str(2**64)], f"engine_seed must be in [-2**63, 2**64 - 1] (64 bits), got {2**64}"),
    (["--logprobs", "1000000"], "logprobs 1000000 is above the model's vocabulary size"),
    (["--prompt-logprobs", "1000000"], "prompt_logprobs 1000000 is above the model's vocabulary size"),
    (["--n", "1000000"], "n 1000000 is above max_n (128): the job's setting would fail every row"),
])
def test_usage_mistakes_print_one_line_and_exit_2(capsys, tmp_path: Path, tiny_llama: Path, data: Path,
                                                  arguments: list[str], message: str) -> None:
    base = {"--model": str(tiny_llama), "--input": str(data), "--output": str(tmp_path / "out")}
    for flag in ("--model", "--input", "--output"):
        if flag in arguments:
            base[flag] = arguments.pop(arguments.index(flag) + 1)
            arguments.remove(flag)
    code, out, err = _main(capsys, "run", *[part for pair in base.items() for part in pair], *arguments)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bulkinfer: error: ") and message in err, err
    assert not (tmp_path / "out" / "job.json").exists()


def test_missing_required_settings_are_named(capsys) -> None:
    code, _, err = _main(capsys, "run", "--model", "m")
    assert (code, err) == (2, "bulkinfer: error: missing --input, --output\n")


def test_help_shows_defaults(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one option per line
    code, out, _ = _main(capsys, "run", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "--max-tokens" in flat and "(default: 256)" in flat and "--no-prefix-caching" in flat


def test_run_status_export(capsys, tmp_path: Path, tiny_llama: Path, data: Path) -> None:
    run = ["run", "--model", str(tiny_llama), "--input", str(data), "--output", str(tmp_path / "out"),
           "--max-tokens", "3", "--temperature", "0"]
    code, _, err = _main(capsys, *run)
    assert code == 0 and "complete: 5 of 5 rows done, 1 with errors" in err and "bulkinfer export" in err
    code, out, _ = _main(capsys, "status", str(tmp_path / "out"), "--json")
    assert code == 0 and json.loads(out) == {"rows_total": 5, "rows_done": 5, "rows_failed": 1, "state": "complete"}
    code, out, _ = _main(capsys, "status", str(tmp_path / "out"))
    assert out == "complete: 5 of 5 rows done, 1 with errors\n"
    code, _, err = _main(capsys, "export", str(tmp_path / "out"), str(tmp_path / "results.jsonl"))
    assert code == 0 and "wrote 5 rows (1 with errors)" in err
    assert [row["row_index"] for row in read_results(tmp_path / "results.jsonl")] == [0, 1, 2, 3, 4]
    code, _, _ = _main(capsys, *run, "--fail-on-error")
    assert code == 1  # the job is complete; its error row now fails the run


# DeepSeek-V3's latent attention and routed experts run natively.
@pytest.mark.parametrize(("arch", "overrides"), [("qwen3_moe", {}), ("deepseek_v3", {})])
def test_mixture_of_experts_and_latent_attention_models_run_a_job_like_any_model(
        capsys, tmp_path: Path, checkpoint_factory, arch: str, overrides: dict) -> None:
    from bulkinfer import LLM, SamplingParams

    model = checkpoint_factory(arch, **overrides)
    data = write_jsonl(tmp_path / "in.jsonl", prompts(3))
    code, _, err = _main(capsys, "run", "--model", str(model), "--input", str(data), "--output", str(tmp_path / "out"),
                         "--max-tokens", "4", "--temperature", "0", "--dtype", "float32")
    assert code == 0 and "complete: 3 of 3 rows done" in err
    assert _main(capsys, "export", str(tmp_path / "out"), str(tmp_path / "results.jsonl"))[0] == 0
    rows = read_results(tmp_path / "results.jsonl")
    llm = LLM(str(model), dtype="float32")
    assert llm.model_config.implementation == "native"
    expected = llm.generate([row["prompt"] for row in prompts(3)],
                            SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert [row["generated_text"] for row in rows] == [output.outputs[0].text for output in expected]


def test_status_and_export_of_a_non_job_are_usage_errors(capsys, tmp_path: Path) -> None:
    for argv in (["status", str(tmp_path)], ["export", str(tmp_path), str(tmp_path / "x.parquet")]):
        code, _, err = _main(capsys, *argv)
        assert code == 2 and err == f"bulkinfer: error: {tmp_path}: not a bulkinfer output directory (no job.json)\n"


def _damaged_inputs(tmp_path: Path) -> dict[str, Path]:
    """Files a user may point a job at that cannot be read, each named for what is wrong with it."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"prompt": [f"{i}+1=" for i in range(200)]}), good)
    files = {"cut.parquet": good.read_bytes()[:300], "text.parquet": b"prompt\n1+1=\n", "empty.parquet": b""}
    lines = b"".join(json.dumps({"prompt": f"{i}+1="}).encode() + b"\n" for i in range(20_000))
    files["cut.jsonl.gz"] = gzip.compress(lines)[:5_000]
    paths = {}
    for name, content in files.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(content)
    paths["twice.parquet"] = tmp_path / "twice.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["prompt", "prompt"]),
                   paths["twice.parquet"])
    return paths


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_unreadable_inputs_are_one_line_before_anything_is_written(capsys, tmp_path: Path, tiny_llama: Path,
                                                                   command: str) -> None:
    for name, path in _damaged_inputs(tmp_path).items():
        out = tmp_path / f"out-{name}"
        argv = ["run", "--model", str(tiny_llama), "--input", str(path), "--output", str(out)] \
            if command == "run" else ["inspect", str(path)]
        code, _, err = _main(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"bulkinfer: error: {path}"), (name, err)
        expected = "has two columns named 'prompt'" if name == "twice.parquet" else "the file is damaged or not"
        assert expected in err, (name, err)
        assert not out.exists()


@pytest.mark.parametrize("arguments, message", [
    (["--dtype", "float64"], "dtype must be one of auto, float32"),
    (["--device", "cuda"], "no CUDA GPU is available"),
    (["--max-model-len", "100000"], "max_model_len must be between 1 and"),
])
def test_engine_settings_are_refused_before_job_json_is_written(capsys, tmp_path: Path, tiny_llama: Path,
                                                                data: Path, arguments: list[str], message: str):
    out = tmp_path / "out"
    code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", str(data), "--output", str(out),
                         *arguments)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (out / "job.json").exists()
    # The corrected command is then a new job, not "a different job".
    code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", str(data), "--output", str(out),
                         "--max-tokens", "2")
    assert code == 0, err


def test_an_output_directory_inside_an_input_directory_is_refused(capsys, tmp_path: Path, tiny_llama: Path,
                                                                  data: Path) -> None:
    code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", str(tmp_path), "--output",
                         str(tmp_path / "out"))
    assert code == 2 and "is inside the input" in err and err.count("\n") == 1, err


def test_an_input_without_rows_completes_with_a_warning(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    empty = write_jsonl(tmp_path / "empty.jsonl", [])
    code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", str(empty), "--output",
                         str(tmp_path / "out"))
    assert code == 0 and "the input holds no rows" in err, err


@pytest.fixture
def unwritable(tmp_path: Path):
    """An existing, empty directory nobody may write into, root included (an immutable one, for root)."""
    import os
    import shutil
    import subprocess

    directory = tmp_path / "locked"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        yield directory
        directory.chmod(0o755)
        return
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(directory)]).returncode != 0:
        pytest.skip("root, and this filesystem has no immutable directories to refuse a write")
    try:
        yield directory
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_an_output_directory_that_cannot_be_written_is_one_line(capsys, tiny_llama: Path, data: Path,
                                                                unwritable: Path) -> None:
    code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", str(data), "--output",
                         str(unwritable))
    assert (code, err) == (2, f"bulkinfer: error: {unwritable}: the output directory cannot be written "
                              f"(permission denied); choose another --output\n")


def test_export_is_the_same_however_the_run_split_rows_into_files(capsys, tmp_path: Path, tiny_llama: Path) -> None:
    values = [2.0, "two", 3, [1, 2.0], {"a": 1.0}, True, None]
    data = write_jsonl(tmp_path / "mixed.jsonl", [{"prompt": f"p{i}", "v": v} for i, v in enumerate(values)])
    exported = set()
    for shard_rows in (1, 3, 10_000):  # one sequence at a time, so that rows finish one by one
        out, file = tmp_path / f"out-{shard_rows}", tmp_path / f"{shard_rows}.jsonl"
        code, _, err = _main(capsys, "run", "--model", str(tiny_llama), "--input", str(data), "--output", str(out),
                             "--max-tokens", "1", "--temperature", "0", "--max-num-seqs", "1",
                             "--shard-rows", str(shard_rows))
        assert code == 0, err
        assert len(committed(out / "ledger.jsonl")) == -(-len(values) // shard_rows)
        assert _main(capsys, "export", str(out), str(file))[0] == 0
        exported.add(file.read_bytes())
    assert len(exported) == 1
    assert [row["v"] for row in read_results(file)] == ["2", "two", "3", "[1, 2]", '{"a": 1}', "true", None]
