"""Tensor parallelism on the CPU: two gloo ranks in two processes give what one process gives."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bulkinfer import LLM, SamplingParams
from bulkinfer.runner import JobConfig, export_job, job_status, run_job
from runner_files import prompts, read_results, write_jsonl
from subprocess_job import commits, wait_for

pytestmark = pytest.mark.slow  # spawns rank processes with a process group each

PROMPTS = [[5, 6, 7], list(range(10, 40)), list(range(50, 67)), list(range(100, 190))]
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=3)
# A small step budget, so prompts are prefilled in chunks alongside other sequences' decodes.
ENGINE = dict(max_model_len=256, max_num_batched_tokens=24, block_size=8)


def _run(path: Path, tensor_parallel_size: int):
    with LLM(str(path), dtype="float32", tensor_parallel_size=tensor_parallel_size, **ENGINE) as llm:
        outputs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
        scores = llm.loglikelihood_tokens([(PROMPTS[1], PROMPTS[2]), (PROMPTS[0], PROMPTS[3])])
    return [o.outputs[0] for o in outputs], scores


@pytest.mark.parametrize("arch, overrides", [
    ("llama", {}),  # GQA: 4 heads over 2 KV heads, one KV head per rank
    ("llama3", {}),  # tied embeddings: the LM head uses the embedding's vocabulary slice
    ("qwen2", {}),  # q/k/v biases
    ("qwen3", {}),  # q/k norms
    ("llama", {"vocab_size": 701}),  # the last rank's vocabulary slice ends in a padding row
    # Mixture of experts: each rank holds half of every expert's columns (docs/scale-out.md)
    ("mixtral", {}),
    ("qwen2_moe", {}),  # and half of the shared expert's; its gate is replicated
    ("qwen3_moe", {}),
    # Multi-head latent attention: each rank 2 of the 4 heads (q, kv_b and o), the latent rows on both
    ("deepseek_v2", {}),
    ("deepseek_v3", {}),  # and the q_a projection and its norm, whole on both
])
def test_two_ranks_give_the_results_of_one(checkpoint_factory, arch, overrides):
    path = checkpoint_factory(arch, **overrides)
    (one, one_scores), (two, two_scores) = _run(path, 1), _run(path, 2)
    assert [o.token_ids for o in two] == [o.token_ids for o in one]
    for a, b in zip(one, two):
        for record_a, record_b in zip(a.logprobs, b.logprobs):
            assert record_a.keys() == record_b.keys()
            for token in record_a:
                assert record_b[token].logprob == pytest.approx(record_a[token].logprob, abs=1e-4)
    for a, b in zip(one_scores, two_scores):
        assert b.logprob == pytest.approx(a.logprob, abs=1e-3) and b.is_greedy == a.is_greedy


def test_gpt_oss_on_two_ranks_gives_the_results_of_one(tiny_gpt_oss):
    """Each rank its heads' sinks and half of every expert's columns; the o_proj and down biases, whole on every
    rank, added once after the sum."""
    (one, _), (two, _) = _run(tiny_gpt_oss, 1), _run(tiny_gpt_oss, 2)
    assert [o.token_ids for o in two] == [o.token_ids for o in one]
    for a, b in zip(one, two):
        assert [r[t].logprob for r, t in zip(b.logprobs, b.token_ids)] == pytest.approx(
            [r[t].logprob for r, t in zip(a.logprobs, a.token_ids)], abs=1e-4)


def test_heads_that_do_not_divide_are_refused_before_any_process_starts(checkpoint_factory):
    path = checkpoint_factory("llama", num_key_value_heads=1)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"key/value heads \(1\) do not divide by tensor_parallel_size \(2\)"):
        LLM(str(path), dtype="float32", tensor_parallel_size=2)
    assert time.monotonic() - started < 5


def test_expert_columns_that_do_not_divide_are_refused(checkpoint_factory):
    path = checkpoint_factory("qwen3_moe", moe_intermediate_size=33)
    with pytest.raises(ValueError, match=r"expert MLP columns \(moe_intermediate_size\) \(33\) do not divide"):
        LLM(str(path), dtype="float32", tensor_parallel_size=2)


def test_close_stops_the_worker_and_a_dead_worker_is_named(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", tensor_parallel_size=2, **ENGINE)
    [worker] = llm.runner.workers.processes
    llm.generate(PROMPTS[:1], GREEDY, use_tqdm=False)
    os.kill(worker.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"tensor-parallel rank 1 exited \(exit code -9\)"):
        llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    llm.close()

    with LLM(str(tiny_llama), dtype="float32", tensor_parallel_size=2, **ENGINE) as llm:
        [worker] = llm.runner.workers.processes
    assert not worker.is_alive() and worker.exitcode == 0


_ENGINE_THEN_WAIT = """
import sys, time
from bulkinfer import LLM
llm = LLM(sys.argv[1], dtype="float32", tensor_parallel_size=2, max_model_len=256)
print(llm.runner.workers.processes[0].pid, flush=True)
time.sleep(600)
"""


def test_a_killed_engine_leaves_no_worker_behind(tiny_llama):
    engine = subprocess.Popen([sys.executable, "-c", _ENGINE_THEN_WAIT, str(tiny_llama)], stdout=subprocess.PIPE,
                              text=True)
    worker_pid = int(engine.stdout.readline())
    engine.kill()
    engine.wait()
    deadline = time.monotonic() + 30
    while _alive(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker_pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has exited; only init may reap it
    except FileNotFoundError:
        return False


CLI = [sys.executable, "-c", "from bulkinfer.cli import main; main()"]
JOB = dict(dtype="float32", max_tokens=6, temperature=0.0, max_num_seqs=8, window_rows=16, shard_rows=8, commit_seconds=0.3)


def _job_flags(model: Path, data: Path, out: Path) -> list[str]:
    flags = ["run", "--model", str(model), "--input", str(data), "--output", str(out)]
    return flags + [part for name, value in JOB.items() for part in ("--" + name.replace("_", "-"), str(value))]


def test_a_job_on_two_ranks_survives_ctrl_c_and_matches_one_rank(tmp_path, tiny_llama):
    data = write_jsonl(tmp_path / "in.jsonl", prompts(120))
    run_job(JobConfig.from_settings(model=str(tiny_llama), input=[str(data)], output=str(tmp_path / "one"), **JOB))
    out = tmp_path / "two"
    flags = _job_flags(tiny_llama, data, out) + ["--tensor-parallel-size", "2"]
    # Ctrl-C in a terminal signals the whole process group: the worker rank must leave the stop to rank 0.
    job = subprocess.Popen(CLI + flags, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert wait_for(lambda: commits(out) >= 1, job)
    os.killpg(job.pid, signal.SIGINT)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 130, err
    assert job_status(out).state == "interrupted"
    assert subprocess.run(CLI + flags, capture_output=True, text=True, timeout=300).returncode == 0
    one, two = _exported(tmp_path / "one"), _exported(out)
    assert two == one and len(one) == 120


def _exported(out: Path) -> list[dict]:
    export_job(out, out.with_suffix(".parquet"))
    return read_results(out.with_suffix(".parquet"))


def test_a_model_that_does_not_split_is_a_usage_error(tmp_path, checkpoint_factory):
    model = checkpoint_factory("llama", num_key_value_heads=1)
    data = write_jsonl(tmp_path / "in.jsonl", prompts(3))
    result = subprocess.run(CLI + _job_flags(model, data, tmp_path / "out") + ["--tensor-parallel-size", "2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("the model's key/value heads (1) do not divide by tensor_parallel_size (2)")
    assert len(result.stderr.strip().splitlines()) == 1


_NO_MAIN_GUARD = """
from bulkinfer import LLM
llm = LLM({model!r}, dtype="float32", tensor_parallel_size=2, max_model_len=64)
print("made", flush=True)
"""


def test_a_script_without_a_main_guard_is_told_so_instead_of_hanging(tmp_path, tiny_llama):
    script = tmp_path / "no_guard.py"
    script.write_text(_NO_MAIN_GUARD.format(model=str(tiny_llama)))
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "made" not in result.stdout
    assert 'if __name__ == "__main__":' in result.stderr.splitlines()[-1], result.stderr[-2000:]
    assert time.monotonic() - started < 60
