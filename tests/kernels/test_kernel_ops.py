"""The Triton KernelOps: chosen by resolve_ops, and a clear error where Triton cannot run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernel_testing import DEVICE


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
