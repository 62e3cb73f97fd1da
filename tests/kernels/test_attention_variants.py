"""Sliding-window, soft-capped and sink attention in the reference and the CPU paths, against
attention written out per token.

The oracle follows transformers' eager attention: scores scaled, capped as ``c * tanh(s / c)``,
then masked (causal, and ``key > query - window``), each head's sink logit appended (gpt-oss),
softmax, the sink's weight dropped, values. Rows mix decode, fresh prefill
and extends over a cached prefix, with windows shorter and longer than the contexts.
"""

from __future__ import annotations

import pytest
import torch

from kernel_testing import attention_written_out, make_batch, random_sinks

from bulkinfer.kernels import paged_attention_cpu as paged_attention_cpu_module
from bulkinfer.kernels.paged_attention import paged_attention_ref
from bulkinfer.kernels.paged_attention_cpu import paged_attention_cpu
from bulkinfer.kernels.paged_attention_invariant import paged_attention_invariant

ROWS = [(1, 1), (1, 17), (1, 50), (16, 16), (37, 37), (5, 20), (16, 50)]


@pytest.mark.parametrize("sliding_window,softcap", [(0, 0.0), (4, 0.0), (16, 0.0), (1, 0.0), (0, 5.0), (7, 2.0)])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(2, 2), (8, 2)])
def test_reference_variants(num_heads, num_kv_heads, sliding_window, softcap):
    batch = make_batch(ROWS, num_heads, num_kv_heads, 32, torch.float32, seed=3)
    batch = {k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}
    expected = attention_written_out(batch, sliding_window, softcap)
    actual = paged_attention_ref(**batch, sliding_window=sliding_window, softcap=softcap)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_a_window_changes_the_result():
    batch = make_batch([(1, 50), (16, 50)], 2, 2, 32, torch.float32, seed=4)
    batch = {k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}
    assert not torch.allclose(paged_attention_ref(**batch, sliding_window=8), paged_attention_ref(**batch))
    assert not torch.allclose(paged_attention_ref(**batch, softcap=1.0), paged_attention_ref(**batch))


SINK_CASES = [(path, window, cap) for path in (paged_attention_ref, paged_attention_invariant)
              for window, cap in ((0, 0.0), (4, 0.0), (16, 0.0), (7, 2.0))]
SINK_CASES.append((paged_attention_cpu, 16, 0.0))  # one compile of the CPU's decode: they cost seconds each


@pytest.mark.parametrize("path,sliding_window,softcap", SINK_CASES)
def test_sinks_on_the_cpu_paths(path, sliding_window, softcap, monkeypatch):
    monkeypatch.setattr(paged_attention_cpu_module, "MIN_KEYS", 0)  # the compiled decode for every group
    batch = make_batch(ROWS, 8, 2, 32, torch.float32, seed=6)
    batch = {k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()}
    sinks = random_sinks(8)
    expected = attention_written_out(batch, sliding_window, softcap, sinks)
    actual = path(**batch, sliding_window=sliding_window, softcap=softcap, sinks=sinks)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(actual, attention_written_out(batch, sliding_window, softcap), atol=1e-3)
