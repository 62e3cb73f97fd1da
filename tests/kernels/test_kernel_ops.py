"""The Triton KernelOps: chosen by resolve_ops, and a clear error where Triton cannot run; every
KernelOps' attention honours a sliding window, a soft-cap and sinks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernel_testing import DEVICE, assert_close, attention_written_out, make_batch, random_sinks


def test_resolve_ops_gives_the_triton_kernels():
    pytest.importorskip("triton")
    from bulkinfer.kernels.paged_attention import paged_attention_triton
    from bulkinfer.layers.ops import resolve_ops

    ops = resolve_ops("triton", DEVICE)
    assert ops.name == "triton" and ops.paged_attention is paged_attention_triton


def _run(code: str, env_interpret: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if env_interpret is not None:
        env["TRITON_INTERPRET"] = env_interpret
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_without_triton_references_import_and_triton_ops_fails_clearly():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` raise ImportError
        "import torch\n"
        "from bulkinfer.kernels.paged_attention import paged_attention_ref\n"
        "from bulkinfer.layers.ops import resolve_ops\n"
        "assert resolve_ops('torch', torch.device('cpu')).name == 'torch'\n"
        "try:\n"
        "    resolve_ops('triton', torch.device('cpu'))\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = _run(code, None)
    assert result.returncode == 0, result.stderr
    assert "needs the triton package" in result.stdout and len(result.stdout.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the kernels compile; no interpreter needed")
def test_triton_on_cpu_without_the_interpreter_says_how():
    pytest.importorskip("triton")
    code = (
        "import torch\n"
        "from bulkinfer.layers.ops import resolve_ops\n"
        "try:\n"
        "    resolve_ops('triton', torch.device('cpu'))\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = _run(code, None)
    assert result.returncode == 0, result.stderr
    assert "TRITON_INTERPRET=1" in result.stdout


@pytest.mark.parametrize("backend,batch_invariant", [("torch", False), ("auto", False), ("auto", True),
                                                     ("triton", False), ("triton", True)])
def test_every_kernel_set_honours_a_window_a_cap_and_sinks(backend, batch_invariant):
    if backend == "triton":
        pytest.importorskip("triton")
    from bulkinfer.kernels.paged_attention import paged_attention_ref
    from bulkinfer.layers.ops import resolve_ops

    ops = resolve_ops(backend, DEVICE, batch_invariant=batch_invariant)
    batch = make_batch([(1, 40), (6, 6), (5, 30)], 4, 2, 64, torch.float32, seed=9)
    args = [batch[name] for name in ("query", "k_cache", "v_cache", "query_start_loc", "seq_lens", "block_tables",
                                     "scale")]
    actual = ops.paged_attention(*args, max_query_len=6, max_seq_len=40, min_query_len=1, sliding_window=9,
                                 softcap=2.0)
    assert_close(actual, paged_attention_ref(*args, sliding_window=9, softcap=2.0))
    assert not torch.allclose(actual, paged_attention_ref(*args))
    sinks = random_sinks(4).to(DEVICE)
    with_sinks = ops.paged_attention(*args, max_query_len=6, max_seq_len=40, min_query_len=1, sliding_window=9,
                                     sinks=sinks)
    assert_close(with_sinks, attention_written_out(batch, 9, sinks=sinks))
