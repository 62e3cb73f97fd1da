"""Every Triton kernel compiles for sm_80, sm_86 and sm_90 without a GPU: no compile error, shared
memory within the target's limit, no register spill.

The check runs in a subprocess: this test session defines its kernels in Triton's interpreter
when there is no GPU, and interpreted kernels cannot be compiled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from bulkinfer.bench.compile_check import CHECKS, FULL, QUICK, SAMPLE
from bulkinfer.kernels.expert_weights import FORMATS
from bulkinfer.kernels.paged_attention import attention_tiles, extend_shared_bytes
from bulkinfer.kernels.target import KNOWN_TARGETS, KernelTarget, check_supported

KERNELS = {"_extend_kernel", "_decode_kernel", "_merge_splits_kernel", "_store_kv_kernel", "_rotary_kernel",
           "_rms_norm_kernel", "_silu_and_mul_kernel", "_grouped_gemm_kernel",
           "_matmul_kernel", "_int_weight_gemm_kernel", "_fp8_gemm_kernel", "_lora_shrink_kernel",
           "_lora_expand_kernel", "_conv_tokens_kernel", "_conv_state_kernel", "_delta_transform_kernel",
           "_delta_state_kernel", "_delta_output_kernel", "_delta_decode_kernel",
           "_ssd_state_kernel", "_ssd_output_kernel", "_ssd_decode_kernel", "_mla_decode_kernel"}


COMPILED_ENV = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def check_command(out, *args: str) -> list[str]:
    return [sys.executable, "-m", "bulkinfer.bench.compile_check", "--out", str(out), *args]


def run_check(out, *args: str) -> dict:
    done = subprocess.run(check_command(out, *args), check=False, env=COMPILED_ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    return json.loads(out.read_text())


def check_report(report: dict, targets) -> None:
    assert report["failures"] == 0
    assert set(report["targets"]) == set(targets)
    for target in targets:
        compiled = {v["kernel"] for v in report["kernels"] if v["target"] == target}
        assert compiled == KERNELS, f"{target}: {KERNELS - compiled} not compiled"
    for variant in report["kernels"]:
        assert variant["registers"] > 0 and variant["shared_bytes"] <= variant["shared_limit"]
        assert variant["stack_bytes"] == 0 and variant["local_bytes"] == 0
        assert variant["num_warps"] >= 1 and variant["num_stages"] >= 1 and variant["shapes"]


def attention_flags(report: dict) -> set:
    return {(v["constexprs"]["HAS_WINDOW"], v["constexprs"]["SOFTCAP"], v["constexprs"]["HAS_SINKS"])
            for v in report["kernels"] if v["kernel"] in ("_extend_kernel", "_decode_kernel")}


def constexpr_values(report: dict, kernel: str, name: str) -> set:
    return {(v["target"], v["constexprs"][name]) for v in report["kernels"] if v["kernel"] == kernel}


def fp8_kernels(report: dict, target: str) -> set:
    """The kernels compiled for an FP8 KV cache on ``target``."""
    return {v["kernel"] for v in report["kernels"] if v["target"] == target and v["constexprs"].get("FP8")}


def test_quick_matrix_compiles(tmp_path):
    report = run_check(tmp_path / "kernels.json", "--jobs", "1")
    check_report(report, QUICK.targets)
    assert attention_flags(report) == {(False, False, False), (True, True, True)}  # plain, and all three on
    moe_formats = constexpr_values(report, "_grouped_gemm_kernel", "WEIGHT_FORMAT")
    assert moe_formats == {(target, fmt) for target in QUICK.targets for fmt in FORMATS}
    # FP8 tensor cores on Hopper; the weight upcast in the kernel on Ampere
    assert constexpr_values(report, "_fp8_gemm_kernel", "FP8_DOT") == {("sm_80", False), ("sm_90", True)}
    for target in QUICK.targets:
        assert fp8_kernels(report, target) == {"_extend_kernel", "_decode_kernel", "_store_kv_kernel"}


def test_checks_can_be_chosen(tmp_path):
    # The FP8 GEMM alone on sm_86: weight-only there, the two scale layouts one variant per row tile.
    report = run_check(tmp_path / "kernels.json", "--checks", "fp8_gemm", "--targets", "sm_86", "--jobs", "1")
    assert report["checks"] == ["fp8_gemm"] and report["failures"] == 0
    assert constexpr_values(report, "_fp8_gemm_kernel", "FP8_DOT") == {("sm_86", False)}
    assert {v["kernel"] for v in report["kernels"]} == {"_fp8_gemm_kernel"}
    done = subprocess.run(check_command(tmp_path / "k.json", "--checks", "fp8_gemm,nonesuch"), env=COMPILED_ENV,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "unknown checks: nonesuch" in done.stderr


@pytest.mark.slow
def test_gpt_oss_mxfp4_experts_with_their_bias_compile(tmp_path):
    """The grouped GEMM as gpt-oss's kept MXFP4 experts run it: with the gate/up bias, on every target."""
    report = run_check(tmp_path / "kernels.json", "--checks", "quantized_moe", "--targets", ",".join(KNOWN_TARGETS),
                       "--jobs", "1")
    assert report["failures"] == 0
    biased = {v["target"] for v in report["kernels"]
              if v["constexprs"]["WEIGHT_FORMAT"] == "mxfp4" and v["constexprs"]["HAS_BIAS"]}
    assert biased == set(KNOWN_TARGETS)
    assert all(v["stack_bytes"] == 0 and v["local_bytes"] == 0 for v in report["kernels"])


@pytest.mark.slow
def test_sample_matrix_compiles(tmp_path):
    # Every kernel on sm_80, sm_86 and sm_90 at the shapes the quick subset leaves out. The full
    # matrix (`--matrix full`) takes too long for a test: it is a documented command (docs/gpu.md).
    report = run_check(tmp_path / "kernels.json", "--matrix", "sample", "--jobs", "2")
    check_report(report, SAMPLE.targets)
    assert set(SAMPLE.targets) == set(FULL.targets)
    assert attention_flags(report) == {(False, False, False), (True, False, False), (False, True, False),
                                       (True, True, False), (False, False, True), (True, False, True)}
    shapes = {label for v in report["kernels"] for label in v["shapes"]}
    assert len(shapes) == (len(SAMPLE.head_dims) * len(SAMPLE.groups) * len(SAMPLE.block_sizes) * len(SAMPLE.dtypes)
                           * len(SAMPLE.fp8_kv))
    for target in SAMPLE.targets:
        assert fp8_kernels(report, target) == {"_extend_kernel", "_decode_kernel", "_store_kv_kernel"}


def session_commands(session: int) -> dict[int, str]:
    """The live processes of a session, by pid: a started check's workers and their ptxas stay in it
    whatever process groups they make."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            comm, rest = stat.read_text().rsplit(")", 1)
        except OSError:  # ended while being read
            continue
        state, _, _, sid = rest.split()[:4]
        if int(sid) == session and state != "Z":
            found[int(stat.parent.name)] = comm.split("(", 1)[1]
    return found


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_an_interrupted_check_ends_with_its_workers_and_ptxas(tmp_path, signum):
    env = {**COMPILED_ENV, "TRITON_CACHE_DIR": str(tmp_path / "cache")}  # compiled kernels would not compile again
    check = subprocess.Popen(check_command(tmp_path / "kernels.json", "--jobs", "2"), env=env,
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: "ptxas" in session_commands(check.pid).values(), 180), "no ptxas started"
        check.send_signal(signum)  # to the check alone, as Ctrl-C in pytest (SIGKILL) or a timeout sends it
        assert wait_until(lambda: check.poll() is not None, 10), "the check went on compiling"
        assert wait_until(lambda: not session_commands(check.pid), 5), session_commands(check.pid)
    finally:
        for pid in session_commands(check.pid):
            os.kill(pid, signal.SIGKILL)
        check.kill()
        check.wait()


def test_every_check_has_a_name_and_launches():
    assert len({check.name for check in CHECKS}) == len(CHECKS)


@pytest.mark.parametrize("target", sorted(KNOWN_TARGETS))
@pytest.mark.parametrize("head_dim", FULL.head_dims)
def test_tiles_fit_shared_memory(target, head_dim):
    for dtype in (torch.float16, torch.bfloat16):
        tiles = attention_tiles(head_dim, dtype, KNOWN_TARGETS[target])
        assert extend_shared_bytes(tiles, head_dim, 2) <= KNOWN_TARGETS[target].shared_memory


def test_tiles_shrink_to_a_small_shared_memory():
    small = KernelTarget("small", 86, 84, 48 * 1024)
    tiles = attention_tiles(128, torch.float16, small)
    assert extend_shared_bytes(tiles, 128, 2) <= 48 * 1024 and tiles.stages == 1


def test_turing_is_refused_in_one_line():
    with pytest.raises(RuntimeError, match="compute capability 8.0 or newer") as info:
        check_supported(KernelTarget("sm_75", 75, 40, 64 * 1024))
    assert "\n" not in str(info.value)
    check_supported(KNOWN_TARGETS["sm_80"])


_BIND_SCRIPT = """
import torch
from bulkinfer.bench.compile_check import bind
from bulkinfer.kernels.paged_attention import attention_launches
from bulkinfer.kernels.target import KNOWN_TARGETS
keys = set()
for num_seqs in (1, 2, 16, 17):
    for width in (1, 3, 16):
        q = torch.zeros(num_seqs, 8, 128, dtype=torch.bfloat16)
        cache = torch.zeros(4, 16, 2, 128, dtype=torch.bfloat16)
        meta = (torch.zeros(num_seqs + 1, dtype=torch.int32), torch.zeros(num_seqs, dtype=torch.int32),
                torch.zeros(num_seqs, width, dtype=torch.int32))
        for num_splits in (1, 4) if num_seqs > 1 else (4, 8):
            launches = attention_launches(q, cache, cache, torch.empty_like(q), *meta, 0.1, KNOWN_TARGETS["sm_90"],
                                          num_splits=num_splits)
            keys |= {bind(launch, KNOWN_TARGETS["sm_90"])[2] for launch in launches}
windowed = set()
for window in (1, 16, 17, 4096):
    for num_splits in (1, 4):
        launches = attention_launches(q, cache, cache, torch.empty_like(q), *meta, 0.1, KNOWN_TARGETS["sm_90"],
                                      num_splits=num_splits, sliding_window=window, softcap=float(window))
        windowed |= {bind(launch, KNOWN_TARGETS["sm_90"])[2] for launch in launches}
scaled = set()
fp8_cache = cache.to(torch.float8_e4m3fn)
for k_scale, v_scale in ((1.0, 1.0), (0.37, 2.5), (4.0, 0.011)):
    for num_splits in (1, 4):
        launches = attention_launches(q, fp8_cache, fp8_cache, torch.empty_like(q), *meta, 0.1,
                                      KNOWN_TARGETS["sm_90"], num_splits=num_splits, k_scale=k_scale, v_scale=v_scale)
        scaled |= {bind(launch, KNOWN_TARGETS["sm_90"])[2] for launch in launches}
print(len(keys), len(windowed), len(scaled))
"""


def test_new_batch_shapes_compile_nothing_new():
    # Sequence counts, block-table widths and split counts change every step, and window sizes and
    # caps from layer to layer; none may select a new compiled variant (extend, unsplit decode,
    # split decode, merge: 4 in all, with or without a window and a cap), nor an FP8 cache's scales.
    done = subprocess.run([sys.executable, "-c", _BIND_SCRIPT], env=COMPILED_ENV, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["4", "4", "4"]


_LORA_BIND_SCRIPT = """
import torch
from bulkinfer.bench.compile_check import bind
from bulkinfer.kernels.lora import lora_expand_launch, lora_shrink_launch, token_groups
from bulkinfer.kernels.target import KNOWN_TARGETS
target = KNOWN_TARGETS["sm_90"]
keys = set()
lora_a = torch.empty(8, 16, 4096, dtype=torch.bfloat16, device="meta")
lora_b = torch.empty(8, 4096, 16, dtype=torch.bfloat16, device="meta")
for tokens in (17, 32, 50, 64):  # 16-row tiles for all of them, over 8 slots
    batch = token_groups(torch.arange(tokens).remainder(9) - 1)
    x, y, out = (torch.zeros(tokens, width, dtype=torch.bfloat16) for width in (4096, 16, 4096))
    keys |= {bind(launch, target)[2] for launch in (lora_shrink_launch(x, lora_a, batch, y, 0.5, target),
                                                     lora_expand_launch(y, lora_b, batch, out, torch.ones(8), target))}
print(len(keys))
"""


def test_new_lora_token_counts_compile_nothing_new():
    # A step's token count (here from 17 to 64, one row tile size) selects no new LoRA variant: one
    # shrink and one expand.
    done = subprocess.run([sys.executable, "-c", _LORA_BIND_SCRIPT], env=COMPILED_ENV, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "2"


_HYBRID_BIND_SCRIPT = """
import torch
from bulkinfer.bench.compile_check import bind, causal_conv1d_cases, gated_delta_rule_cases, mamba_scan_cases
from bulkinfer.bench import compile_check
from bulkinfer.kernels.target import KNOWN_TARGETS
target = KNOWN_TARGETS["sm_90"]
shape = compile_check.Shape(128, 4, 16, torch.bfloat16)
counts = []
for pool in (8, 37, 256):  # the state pool's size varies with the memory budget
    compile_check.HYBRID_SLOTS = pool
    keys = {bind(launch, target)[2] for cases in (causal_conv1d_cases, gated_delta_rule_cases, mamba_scan_cases)
            for launch in cases(shape, target)}
    counts.append(len(keys))
print(*counts)
"""


def test_hybrid_steps_compile_nothing_new():
    # Decode steps and prefills of any token count, over pools of any size, share one variant per
    # kernel and tile: conv (2 kernels, any channel count), delta rule (the chunked prefill's 3 kernels and
    # the decode kernel, in bf16 and in fp32: 8), Mamba2 scan (the chunked prefill's 2 kernels and the decode
    # kernel, per state size, in bf16 and in fp32: 12).
    done = subprocess.run([sys.executable, "-c", _HYBRID_BIND_SCRIPT], env=COMPILED_ENV, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["22", "22", "22"]
