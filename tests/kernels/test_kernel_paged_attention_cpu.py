"""The CPU's compiled decode attention against the reference, and the engine running on it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernel_testing import make_batch

from bulkinfer import LLM, SamplingParams
from bulkinfer.kernels.paged_attention import decode_ref
from bulkinfer.kernels.paged_attention_cpu import MIN_KEYS, _compiled, attend_compiled

# Lengths around block edges (block size 16), one sequence per length; the group is padded to 300.
LENGTHS = [1, 15, 16, 17, 50, 123, 299, 300]


@pytest.mark.parametrize("num_heads, num_kv_heads", [(8, 2), (4, 4)], ids=["gqa4", "mha"])
def test_compiled_decode_equals_the_reference(num_heads, num_kv_heads):
    batch = make_batch([(1, n) for n in LENGTHS], num_heads, num_kv_heads, 64, torch.float32)
    args = (batch["query"], batch["k_cache"], batch["v_cache"], batch["block_tables"], batch["seq_lens"],
            max(LENGTHS), batch["scale"])
    with torch.inference_mode():
        torch.testing.assert_close(attend_compiled(*args), decode_ref(*args), atol=1e-5, rtol=1e-5)


def test_compiled_decode_honours_a_window_and_a_cap():
    # One compile for the pair; windows inside and across blocks, and wider than the short contexts.
    batch = make_batch([(1, n) for n in LENGTHS], 8, 2, 64, torch.float32)
    args = (batch["query"], batch["k_cache"], batch["v_cache"], batch["block_tables"], batch["seq_lens"],
            max(LENGTHS), batch["scale"])
    with torch.inference_mode():
        torch.testing.assert_close(attend_compiled(*args, sliding_window=20, softcap=2.0),
                                   decode_ref(*args, sliding_window=20, softcap=2.0), atol=1e-5, rtol=1e-5)


PROMPTS = [[5 + i, 6, 7] * (60 + 3 * i) for i in range(24)]  # 24 decode rows of ~200 keys: compiled
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=2)


def test_the_engine_gives_the_references_results(tiny_llama):
    assert len(PROMPTS) * 180 >= MIN_KEYS
    outputs, calls = {}, _compiled.cache_info().hits
    for backend in ("auto", "torch"):
        llm = LLM(str(tiny_llama), dtype="float32", attention_backend=backend, max_model_len=512)
        outputs[backend] = [o.outputs[0] for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    assert _compiled.cache_info().hits >= calls + 4  # 5 decode steps, the first may be the cache miss
    for compiled, reference in zip(outputs["auto"], outputs["torch"]):
        assert compiled.token_ids == reference.token_ids
        for a, b in zip(compiled.logprobs, reference.logprobs):
            assert a.keys() == b.keys()
            for token in a:
                assert a[token].logprob == pytest.approx(b[token].logprob, abs=1e-4)


_WITHOUT_A_COMPILER = """
import sys, torch
from bulkinfer.kernels.paged_attention import decode_ref
from bulkinfer.kernels.paged_attention_cpu import decode_compiled
gen = torch.Generator().manual_seed(0)
cache = torch.randn(512, 16, 2, 64, generator=gen), torch.randn(512, 16, 2, 64, generator=gen)
tables = torch.randperm(512, generator=gen)[:16 * 17].view(16, 17).int()
args = (torch.randn(16, 4, 64, generator=gen), *cache, tables, torch.full((16,), 260, dtype=torch.int32), 260, 0.125)
assert torch.equal(decode_compiled(*args), decode_ref(*args))
"""


def test_without_a_compiler_the_reference_runs(tmp_path):
    env = {**os.environ, "CXX": str(tmp_path / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", _WITHOUT_A_COMPILER], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "compiled CPU decode attention is unavailable, using the reference" in result.stderr
