"""bench --quantization: quantized copies of a random model that compressed-tensors reads as bulkinfer does,
and a report with each system's weight bytes and the quantized one's speed against the unquantized one's."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.utils.quantization_config import CompressedTensorsConfig

from bulkinfer import LLM
from bulkinfer.bench.quantized_model import quantized_checkpoint
from bulkinfer.bench.random_model import SHAPES, make_random_checkpoint
from bulkinfer.bench.run import format_report, run_benchmark
from probes import last_logits


@pytest.mark.parametrize("quantization", ["fp8", "w4a16", "w8a16"])
def test_quantized_copies_read_alike_by_compressed_tensors_and_bulkinfer(tmp_path, quantization):
    path = quantized_checkpoint(make_random_checkpoint(tmp_path / "tiny", SHAPES["tiny"]), quantization)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                     quantization_config=CompressedTensorsConfig(dequantize=True))
    ids = list(range(100, 140))
    with torch.no_grad():
        expected = reference(torch.tensor([ids])).logits[0, -1]
    torch.testing.assert_close(last_logits(LLM(str(path), dtype="float32", max_model_len=64), ids), expected,
                               atol=1e-4, rtol=0)


@pytest.mark.slow
def test_bench_reports_weight_bytes_and_speed_against_the_unquantized_model():
    report = run_benchmark("random:tiny", "mixed", 4, compare=("bulkinfer",), repeats=1, quantization="w4a16",
                           device="cpu")
    plain, quantized = report["systems"]["bulkinfer"], report["systems"]["bulkinfer-w4a16"]
    assert quantized["weight_bytes"] < plain["weight_bytes"]
    assert quantized["vs_unquantized"] == pytest.approx(quantized["useful_output_tok_s"] / plain["useful_output_tok_s"],
                                                        abs=1e-3)
    assert "bulkinfer-w4a16" in format_report(report) and "the unquantized tok/s" in format_report(report)
