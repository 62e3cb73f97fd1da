"""A quantized checkpoint bulkinfer does not run is refused from its config alone, in one line naming the method
or the variant, before any weight loads."""

from __future__ import annotations

import json
import shutil

import pytest

from bulkinfer import LLM
from bulkinfer.models.refusal import UnsupportedModelError
from quantized_checkpoints import gptq_config, gptq_quantizer, write_by_layout

CT_INT4 = {"format": "pack-quantized", "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                   "group_size": 128, "symmetric": True}}
FP8_STATIC = {"format": "float-quantized",
              "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
              "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}}


def compressed_tensors(*schemes: dict) -> dict:
    return {"quant_method": "compressed-tensors", "config_groups": {f"group_{i}": s for i, s in enumerate(schemes)}}


@pytest.mark.parametrize("quantization_config, words", [
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "quantization method 'bitsandbytes'"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "GPTQ with 3 bits"),
    ({"quant_method": "awq", "bits": 4, "version": "gemv"}, "'gemv' layout"),
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
     "activation_scheme 'static'"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "without weight_block_size"),
    (compressed_tensors(FP8_STATIC), "reads no static scales"),
    (compressed_tensors(CT_INT4 | {"format": "int-quantized"}), "format 'int-quantized'"),
    (compressed_tensors(CT_INT4 | {"input_activations": {"num_bits": 8, "type": "int"}}), "(W4A8)"),
    (compressed_tensors(CT_INT4, FP8_STATIC), "several different schemes"),
    (compressed_tensors({**CT_INT4, "weights": {**CT_INT4["weights"], "num_bits": 2}}), "num_bits=2"),
])
def test_refused_before_weights_load(tiny_llama, tmp_path, quantization_config, words):
    path = tmp_path / "model"
    shutil.copytree(tiny_llama, path)
    for weights in path.glob("*.safetensors"):
        weights.unlink()  # a refusal must not need them
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"quantization_config": quantization_config}))
    with pytest.raises(UnsupportedModelError) as info:
        LLM(str(path))
    assert "\n" not in str(info.value) and words in str(info.value)


def test_transformers_path_and_act_order_over_ranks_are_refused(tiny_llama, tmp_path):
    path = tmp_path / "model"
    shutil.copytree(tiny_llama, path)
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True}
    config = json.loads((path / "config.json").read_text()) | {"quantization_config": gptq}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="own model code only"):
        LLM(str(path), model_impl="transformers")
    with pytest.raises(ValueError, match="tensor_parallel_size > 1 with act-order weights"):
        LLM(str(path), tensor_parallel_size=2)


def test_act_order_experts_are_refused(checkpoint_factory, tmp_path):
    """Refused from the weight files' headers, before a tensor is read."""
    path, _ = write_by_layout(checkpoint_factory("qwen3_moe"), tmp_path / "moe", gptq_config(4, 32, True, True),
                              gptq_quantizer(4, 32, True, True))
    with pytest.raises(UnsupportedModelError, match="act-order.*for mixture-of-experts experts"):
        LLM(str(path))
