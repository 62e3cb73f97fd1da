"""The decode probe's step timing and its count of the bytes a decode step must read."""

from __future__ import annotations

import pytest
import torch

import bulkinfer.bench.decode_floor as decode_floor
from bulkinfer import LLM
from bulkinfer.bench.peak import copy_bytes_per_s


def _multiplied_weights(llm: LLM) -> int:
    """Counted from the loaded model itself: the projections and the LM head."""
    return sum(p.numel() for name, p in llm.runner.model.named_parameters()
               if name.endswith("proj.weight") or name.startswith("lm_head"))


@pytest.mark.parametrize("kv_cache_dtype,kv_element_bytes", [("auto", 4), ("fp8_e4m3", 1)])
@pytest.mark.parametrize("steps", [1, 5])
def test_the_probe_counts_weights_once_and_every_cached_token_per_step(tiny_llama, monkeypatch, steps,
                                                                       kv_cache_dtype, kv_element_bytes):
    batch, prompt = 6, 40  # one prefill step for all six, then one step of decodes alone, then the timed ones
    monkeypatch.setitem(decode_floor.PROBE_SIZES, "cpu", (batch, prompt, steps))
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, kv_cache_dtype=kv_cache_dtype)
    probe = decode_floor.probe_decode(llm)
    assert (probe.batch, probe.prompt_tokens, probe.steps) == (batch, prompt, steps)
    config = llm.model_config
    kv_bytes_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * kv_element_bytes
    # Before timed step j each sequence holds its prompt and 2 + j tokens: the first from its prefill,
    # one from the untimed decode step, j from the timed ones; step j stores and reads the last of them.
    cached = sum(batch * (prompt + 2 + j) for j in range(steps))
    assert probe.bytes_read == steps * _multiplied_weights(llm) * 4 + cached * kv_bytes_per_token
    assert not llm.has_unfinished_requests()  # the probe's requests are drained


def test_the_report_puts_the_step_against_the_floor():
    probe = decode_floor.DecodeProbe(batch=8, prompt_tokens=100, steps=4, seconds=0.2, bytes_read=4_000_000)
    report = probe.report(copy_bytes_per_s=1e9)  # the floor: 4 ms for the four steps, 1 ms each
    assert report == {"batch": 8, "prompt_tokens": 100, "steps": 4, "step_ms": 50.0, "floor_ms": 1.0,
                      "vs_floor": 50.0}


def test_an_engine_too_small_for_the_probe_says_so(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=256, num_kv_blocks=2)
    with pytest.raises(ValueError, match="too small for the decode probe"):
        decode_floor.probe_decode(llm)


def test_copy_bandwidth_is_a_plausible_rate():
    rate = copy_bytes_per_s(torch.device("cpu"), size=16 << 20, seconds=0.2)
    assert 1e8 < rate < 1e13  # between a slow disk's and any machine's memory
