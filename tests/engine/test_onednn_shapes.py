"""The CPU linear layers send oneDNN only a bounded set of input shapes.

oneDNN keeps a compiled kernel (about 0.6 MB) for each input shape it meets, so a job whose steps
each brought a new token count grew its memory with every step, that is, with the dataset.
"""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.layers import linear

pytestmark = pytest.mark.skipif(not linear._ONEDNN, reason="oneDNN is not available")


def test_a_long_run_sends_onednn_few_row_counts(tiny_llama, monkeypatch):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=128, max_num_seqs=48, device="cpu")
    row_counts = set()
    onednn = torch.ops.mkldnn._linear_pointwise

    def recording(x, *args):
        row_counts.add(x.shape[0])
        return onednn(x, *args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", recording)
    # Prompts of 1 to 40 words, as in a dataset: prefill steps of many token counts, then decode
    # batches of every size as the requests finish at different lengths.
    prompts = [" ".join(["word"] * (1 + i % 40)) for i in range(600)]
    params = [SamplingParams(max_tokens=1 + i % 9, temperature=0.0, ignore_eos=True) for i in range(600)]
    llm.generate(prompts, params, use_tqdm=False)
    assert len(row_counts) > 8  # steps of many sizes did reach oneDNN
    assert all(linear.onednn_rows(rows) == rows for rows in row_counts), sorted(row_counts)
    assert len(row_counts) <= len({linear.onednn_rows(rows) for rows in range(1, 2049)}) == 72


def test_padding_stays_under_an_eighth():
    assert all(rows <= linear.onednn_rows(rows) <= rows * 1.125 for rows in range(1, 10_000))
