"""model_args and generation kwargs in bulkinfer's terms; needs no lm_eval."""

from __future__ import annotations

import pytest

from bulkinfer.integrations.lm_eval_settings import ModelArgsError, llm_arguments, sampling_params


def test_model_args_map_onto_llm_arguments():
    arguments = llm_arguments("/models/tiny", None, {"dtype": "float32", "device": "cpu", "max_num_seqs": 8})
    assert arguments == {"model": "/models/tiny", "dtype": "float32", "device": "cpu", "max_num_seqs": 8}


def test_max_length_is_max_model_len():
    assert llm_arguments("m", 128, {})["max_model_len"] == 128
    assert llm_arguments("m", 128, {"max_model_len": 128})["max_model_len"] == 128
    with pytest.raises(ModelArgsError, match="max_length and max_model_len"):
        llm_arguments("m", 128, {"max_model_len": 64})


def test_unknown_and_missing_model_args_are_refused_in_one_line():
    with pytest.raises(ModelArgsError) as refused:
        llm_arguments("m", None, {"trust_remote_code": True, "dtyp": "float32"})
    message = str(refused.value)
    assert "unknown model_args for bulkinfer: dtyp, trust_remote_code" in message
    assert "max_num_seqs" in message and "pretrained" in message and "\n" not in message
    with pytest.raises(ModelArgsError, match="pretrained="):
        llm_arguments(None, None, {})


def test_generation_kwargs_become_greedy_sampling_params_with_eos_as_a_stop():
    gen_kwargs = {"until": ["\n\n", "Q:"], "max_gen_toks": 32, "do_sample": False}
    params = sampling_params(gen_kwargs, {"max_tokens": 256}, "</s>")
    assert params.stop == ["\n\n", "Q:", "</s>"]
    assert params.max_tokens == 32 and params.temperature == 0
    assert sampling_params({"until": "."}, {"max_tokens": 256}, "</s>").stop == [".", "</s>"]
    assert sampling_params({}, {"max_tokens": 256}, "</s>").max_tokens == 256


def test_max_token_aliases_follow_the_harness_priority():
    assert sampling_params({"max_new_tokens": 7, "max_tokens": 9}, {"max_tokens": 256}, "").max_tokens == 7
    assert sampling_params({"max_gen_toks": 5, "max_new_tokens": 7}, {"max_tokens": 256}, "").max_tokens == 5
    assert sampling_params({"max_completion_tokens": 3}, {"max_tokens": 256}, "").max_tokens == 3


def test_sampling_only_when_asked():
    assert sampling_params({"temperature": 0.7}, {"max_tokens": 16}, "").temperature == 0.7  # do_sample unset: implied
    assert sampling_params({"do_sample": False, "temperature": 0.7}, {"max_tokens": 16}, "").temperature == 0
    gen_kwargs = {"do_sample": True, "temperature": 0.8, "top_p": 0.9, "top_k": 0}
    sampled = sampling_params(gen_kwargs, {"max_tokens": 16}, "")
    assert (sampled.temperature, sampled.top_p, sampled.top_k) == (0.8, 0.9, -1)


def test_generation_kwargs_that_cannot_be_honoured_are_refused():
    with pytest.raises(ValueError, match="num_beams"):
        sampling_params({"until": ["\n"], "num_beams": 4}, {"max_tokens": 16}, "")
