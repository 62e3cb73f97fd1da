"""A model that cannot run is refused from its config alone, in one line naming the architecture and why."""

from __future__ import annotations

import json
import shutil

import pytest

from bulkinfer import LLM
from bulkinfer.models.config import UnsupportedModelError


@pytest.mark.parametrize("changes, reason", [
    (dict(architectures=["T5ForConditionalGeneration"], is_encoder_decoder=True), "encoder-decoder"),
    (dict(architectures=["BertForSequenceClassification"]), "no causal LM head"),
    (dict(architectures=["MambaForCausalLM"], model_type="mamba"), "hybrid recurrent"),
    # Natively supported; the transformers path has no state pool.
    (dict(architectures=["GraniteMoeHybridForCausalLM"], model_type="granitemoehybrid",
          layer_types=["mamba", "attention"], model_impl="transformers"), "hybrid recurrent"),
    (dict(architectures=["Qwen3NextForCausalLM"], layer_types=["linear_attention", "full_attention"],
          model_impl="transformers"), "hybrid recurrent"),
    (dict(architectures=["Lfm2ForCausalLM"], model_type="lfm2", full_attn_idxs=[1], model_impl="transformers"),
     "Granite 4.0-H and LFM2 (model_impl auto or native)"),
    (dict(architectures=["Lfm2MoeForCausalLM"], model_type="lfm2_moe", model_impl="transformers"),
     "short convolutions"),
    (dict(architectures=["MyModelForCausalLM"], auto_map={"AutoModelForCausalLM": "modeling_my.MyModel"}),
     "remote code"),
    (dict(architectures=["MptForCausalLM"], model_type="mpt"), "attention interface"),
    (dict(architectures=["NoSuchForCausalLM"], model_type="no_such_model"), "cannot read its config"),
    (dict(architectures=["GPT2LMHeadModel"], model_impl="native"), "no native implementation"),
])
def test_refused_before_weights_load(tiny_llama, tmp_path, changes, reason):
    path = tmp_path / "model"
    shutil.copytree(tiny_llama, path)
    for weights in path.glob("*.safetensors"):
        weights.unlink()  # a refusal must not need them
    changes = dict(changes)
    model_impl = changes.pop("model_impl", "auto")
    config = json.loads((path / "config.json").read_text()) | changes
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError) as info:
        LLM(str(path), model_impl=model_impl)
    message = str(info.value)
    assert "\n" not in message and changes["architectures"][0] in message and reason in message


@pytest.mark.parametrize("changes, words", [
    ({"time_step_limit": [0.001, 0.1]}, "GraniteMoeHybridForCausalLM with time_step_limit"),  # the scan does not clamp
    ({"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}},
     "quantized GraniteMoeHybridForCausalLM (fp8)"),
])
def test_granite_h_variants_it_cannot_run_are_refused(checkpoint_factory, tmp_path, changes, words):
    path = tmp_path / "model"
    shutil.copytree(checkpoint_factory("granite_h"), path)
    config = json.loads((path / "config.json").read_text()) | changes
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError) as info:
        LLM(str(path))
    assert "\n" not in str(info.value) and words in str(info.value)
