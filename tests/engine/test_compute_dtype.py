"""dtype="auto": bfloat16 on a CPU that multiplies it natively, float32 elsewhere, and the reason said."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from bulkinfer import LLM
from bulkinfer.engine.compute_dtype import CPU_BF16_FLAGS, choose_dtype, cpu_flags

CPU = torch.device("cpu")
SAPPHIRE_RAPIDS = frozenset({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"})
ZEN4 = frozenset({"avx512f", "avx512_bf16"})
SKYLAKE = frozenset({"avx2", "avx512f"})


@pytest.mark.parametrize("checkpoint", [torch.float32, torch.bfloat16], ids=str)
def test_auto_picks_bfloat16_where_the_cpu_has_it(checkpoint):
    chosen = choose_dtype("auto", checkpoint, CPU, SAPPHIRE_RAPIDS)
    assert chosen.dtype == torch.bfloat16
    assert chosen.describe() == "bfloat16 (auto: this CPU has AVX512-BF16 and AMX)"
    assert choose_dtype("auto", checkpoint, CPU, ZEN4).reason == "auto: this CPU has AVX512-BF16"


def test_auto_stays_float32_without_native_bfloat16_or_for_a_float16_checkpoint():
    without = choose_dtype("auto", torch.bfloat16, CPU, SKYLAKE)
    assert without.dtype == torch.float32 and "no native bfloat16" in without.reason
    half = choose_dtype("auto", torch.float16, CPU, SAPPHIRE_RAPIDS)
    assert half.dtype == torch.float32 and "float16 checkpoint" in half.reason


def test_an_asked_dtype_is_kept_whatever_the_cpu():
    assert choose_dtype("float32", torch.bfloat16, CPU, SAPPHIRE_RAPIDS).describe() == "float32 (as asked)"
    assert choose_dtype("bf16", torch.float32, CPU, SKYLAKE).dtype == torch.bfloat16


@pytest.mark.skipif(shutil.which("lscpu") is None, reason="needs lscpu")
def test_the_flags_read_are_the_ones_lscpu_lists():
    listed = next(line for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True,
                                                  env={"LC_ALL": "C"}).stdout.splitlines()
                  if line.startswith("Flags:"))
    assert cpu_flags() & set(CPU_BF16_FLAGS) == set(listed.split()[1:]) & set(CPU_BF16_FLAGS)


def test_an_engine_on_this_cpu_runs_and_reports_what_auto_chose(tiny_llama):
    llm = LLM(str(tiny_llama), max_model_len=64, num_kv_blocks=8, device="cpu")
    native = bool(cpu_flags() & set(CPU_BF16_FLAGS))
    expected = torch.bfloat16 if native else torch.float32
    assert {p.dtype for p in llm.runner.model.parameters()} == {expected}
    stats = llm.stats
    assert stats.dtype == str(expected).removeprefix("torch.") and stats.dtype_reason.startswith("auto: this CPU")
