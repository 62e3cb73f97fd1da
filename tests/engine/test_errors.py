"""Mistakes a user can make get one clear error; a request that cannot run gets an error output."""

from __future__ import annotations

import json
import shutil

import pytest

from bulkinfer import LLM, SamplingParams
from bulkinfer.models.config import UnsupportedModelError
from bulkinfer.models.checkpoint import ModelNotFoundError


def test_unsupported_architecture_names_the_supported_ones(tiny_llama, tmp_path):
    path = tmp_path / "gpt2ish"
    shutil.copytree(tiny_llama, path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel.*LlamaForCausalLM.*Qwen3ForCausalLM"):
        LLM(str(path), model_impl="native")


def test_missing_directory_and_offline_hub_id_fail_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="no such model directory"):
        LLM(str(tmp_path / "nope" / "model"))
    with pytest.raises(ModelNotFoundError, match="config.json"):
        LLM(str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as info:
        LLM("someone/some-model-that-is-not-here")
    assert "\n" not in str(info.value) and "could not be fetched" in str(info.value)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dtype="float8"), "dtype"), (dict(device="tpu"), "device"), (dict(block_size=0), "block_size"),
    (dict(max_model_len=100_000), "max_model_len"), (dict(attention_backend="flash"), "attention_backend")])
def test_bad_engine_settings(tiny_llama, kwargs, message):
    with pytest.raises(ValueError, match=message):
        LLM(str(tiny_llama), **kwargs)


def test_bad_sampling_settings():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)


def test_requests_that_cannot_run_get_errors_and_others_go_on(tiny_llama):
    llm = LLM(str(tiny_llama), max_model_len=64, num_kv_blocks=3, block_size=16)
    params = SamplingParams(temperature=0, max_tokens=8)
    outputs = llm.generate([[5] * 60, [], [5, 9999], [5] * 20, "fine"], params, use_tqdm=False)
    errors = [o.error for o in outputs]
    assert "exceeds max_model_len (64)" in errors[0]
    assert errors[1] == "the prompt is empty"
    assert "outside the vocabulary" in errors[2]
    assert errors[3] is None and errors[4] is None
    assert len(outputs[4].outputs[0].token_ids) > 0
    [too_big] = llm.generate([[5] * 50], params, use_tqdm=False)  # fits max_model_len, not the pool
    assert "KV blocks" in too_big.error


def test_duplicate_request_id_is_refused(tiny_llama):
    llm = LLM(str(tiny_llama), max_model_len=64)
    llm.add_request("a", "hello")
    with pytest.raises(ValueError, match="already"):
        llm.add_request("a", "again")
