"""The bench's matmul peak: measured on the model's own shapes in the run's dtype, stable from one measurement to
the next, and a utilisation above it flagged as the measurement error it is."""

from __future__ import annotations

import itertools
import os

import pytest
import torch

from bulkinfer.bench.peak import MatmulShape, matmul_peak, model_matmul_shapes, utilisation
from bulkinfer.bench.random_model import SHAPES, hf_config
from bulkinfer.bench.run import mfu_text
from bulkinfer.models.config import ModelConfig

CPU = torch.device("cpu")


# Several processes per core share each core's time: no wall-clock rate, however measured, holds then.
BUSY = os.getloadavg()[0] > os.cpu_count()


@pytest.mark.skipif(BUSY, reason="the machine runs more processes than it has cores")
def test_a_peak_measured_twice_agrees():
    shapes = [MatmulShape(128, 512, 1024), MatmulShape(16, 512, 256)]
    first, second = (matmul_peak(shapes, torch.float32, CPU, tries=5, seconds=0.1) for _ in range(2))
    assert first.tflops > 0 and first.dtype == torch.float32
    # Best of five tries each: another process's burst lowers a try, not the best one.
    assert second.tflops == pytest.approx(first.tflops, rel=0.25)


def test_the_peak_is_measured_in_the_dtype_asked_and_says_where():
    peak = matmul_peak([MatmulShape(32, 128, 256)], torch.bfloat16, CPU, tries=2, seconds=0.02)
    report = peak.report()
    assert report["peak_dtype"] == "bfloat16" and report["peak_shape"] == [32, 128, 256]
    assert report["peak_tries"] == 2 and report["threads"] == torch.get_num_threads()


def test_the_peak_is_timed_by_the_clock_it_is_given():
    """A CPU-seconds peak (``time.process_time``) is timed by that clock: here one that moves 10 ms a reading,
    so each try makes 9 calls in 0.11 s of it, whatever the wall clock does."""
    readings = itertools.count()
    peak = matmul_peak([MatmulShape(8, 16, 16)], torch.float32, CPU, tries=1, seconds=0.1,
                       clock=lambda: next(readings) * 0.01)
    assert peak.tflops == pytest.approx(9 / 0.11 * MatmulShape(8, 16, 16).flops / 1e12)


def test_the_shapes_are_the_models_projections_at_the_bench_steps():
    config = ModelConfig.from_hf(hf_config(SHAPES["50m"]).to_dict())
    shapes = {(s.rows, s.in_features, s.out_features) for s in model_matmul_shapes(config, (96, 2048), 96)}
    qkv, gate_up = 512 + 2 * 4 * 64, 2 * 1408  # 8 heads of 64 over 4 KV heads; gate and up fused
    for rows in (96, 2048):
        assert {(rows, 512, qkv), (rows, 512, 512), (rows, 512, gate_up), (rows, 1408, 512)} <= shapes
    assert (96, 512, 32000) in shapes and (2048, 512, 32000) not in shapes  # logits: one row per sequence
    assert len(shapes) == 9


def test_a_utilisation_above_one_is_flagged_not_printed_as_mfu():
    assert utilisation(0.2, 0.5) == {"mfu": 0.4}
    flagged = utilisation(0.576, 0.5)
    assert "mfu" not in flagged and "115.2%" in flagged["mfu_error"] and "measurement error" in flagged["mfu_error"]
    assert mfu_text(flagged).startswith("MFU not given: 115.2% of the measured matmul peak")
    assert mfu_text(utilisation(0.2, 0.5)) == "MFU 40.0%"
