"""The tiny checkpoints load back with transformers and behave like real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from checkpoints import ARCHS, BOS, EOS, EOT, MOE_ARCHS, PAD

TEXTS = [
    "Hello, world! 12345 + 678 = 13023.\n",
    "  two leading spaces, a tab\tand\r\nline endings\n\n",
    "Café, naïve, 日本語のテキスト, emoji 🙂 and ¿qué?",
    "trailing space ",
    "",
]


def _tensor_names(checkpoint: Path) -> set[str]:
    names: set[str] = set()
    for shard in checkpoint.glob("*.safetensors"):
        with safe_open(shard, framework="pt") as f:
            names.update(f.keys())
    return names


def _greedy(checkpoint: Path, prompt: str, new_tokens: int = 24) -> list[int]:
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    input_ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(input_ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False)
    return out[0, input_ids.shape[1]:].tolist()


@pytest.mark.parametrize("arch", list(ARCHS))
def test_loads_and_generates_varied_tokens(checkpoint_factory, arch):
    checkpoint = checkpoint_factory(arch)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokens = _greedy(checkpoint, "The engine reads the tokens")
    assert len(tokens) == 24
    assert len(set(tokens)) >= 8, tokens
    assert all(0 <= t < len(tokenizer) for t in tokens)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_config_has_the_arch_features(checkpoint_factory, arch):
    config = json.loads((checkpoint_factory(arch) / "config.json").read_text())
    names = _tensor_names(checkpoint_factory(arch))
    assert config["num_key_value_heads"] == 2 and config["num_attention_heads"] == 4
    assert config["vocab_size"] % 8 == 0
    assert ("model.layers.0.self_attn.q_proj.bias" in names) == (arch in ("qwen2", "qwen2_moe"))
    assert ("model.layers.0.self_attn.q_norm.weight" in names) == (arch in ("qwen3", "qwen3_moe"))
    with_experts = (*MOE_ARCHS, "qwen3_next", "qwen3_5_moe", "lfm2_moe")
    assert any(".experts.1." in name for name in names) == (arch in with_experts)
    assert ("lm_head.weight" in names) == (not config["tie_word_embeddings"])
    rope = config["rope_parameters"]
    assert rope["rope_type"] == ("llama3" if arch == "llama3" else "default")
    if arch in ("qwen3", "qwen3_moe"):
        assert config["head_dim"] * config["num_attention_heads"] != config["hidden_size"]


def test_both_tied_and_untied_defaults_exist(checkpoint_factory):
    tied = {arch: json.loads((checkpoint_factory(arch) / "config.json").read_text())
            ["tie_word_embeddings"] for arch in ARCHS}
    assert set(tied.values()) == {True, False}


def test_vocab_is_padded_past_the_tokenizer(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    config = json.loads((tiny_llama / "config.json").read_text())
    assert 500 <= len(tokenizer) < config["vocab_size"] <= len(tokenizer) + 7


@pytest.mark.parametrize("arch", list(ARCHS))
def test_special_tokens_are_the_same_for_every_arch(checkpoint_factory, arch):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint_factory(arch))
    ids = tokenizer.convert_tokens_to_ids([PAD, BOS, EOS, EOT])
    assert ids == [0, 1, 2, 3]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert len(tokenizer) == len(AutoTokenizer.from_pretrained(checkpoint_factory("llama")))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2 loads as Qwen2Tokenizer
@pytest.mark.parametrize("text", TEXTS)
def test_text_round_trips_with_bos_added(checkpoint_factory, arch, text):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint_factory(arch))
    ids = tokenizer(text).input_ids
    assert ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer(text, add_special_tokens=False).input_ids == ids[1:]


def test_chat_template_renders_with_one_bos(tiny_llama):
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<s><|system|>\nBe brief.<|eot|>\n<|user|>\nHi!<|eot|>\n<|assistant|>\n"
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                        return_dict=False)
    assert ids.count(tokenizer.bos_token_id) == 1 and ids.count(3) == 2
    closed = tokenizer.apply_chat_template(messages, tokenize=False)
    assert closed.endswith("Hi!<|eot|>\n")


def test_generation_config_eos(checkpoint_factory):
    def eos(arch: str, name: str = "generation_config.json") -> object:
        return json.loads((checkpoint_factory(arch) / name).read_text())["eos_token_id"]

    assert eos("llama") == 2
    assert eos("llama3") == [2, 3]
    assert eos("llama3", "config.json") == 2


def test_sharded_checkpoint_has_index_and_same_weights(checkpoint_factory, tiny_llama):
    sharded = checkpoint_factory("llama", sharded=True)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert set(index["weight_map"]) == _tensor_names(tiny_llama)
    assert _greedy(sharded, "Hello") == _greedy(tiny_llama, "Hello")


@pytest.mark.parametrize("kv_heads", [1, 4])
def test_kv_head_override(checkpoint_factory, kv_heads):
    checkpoint = checkpoint_factory("mistral", num_key_value_heads=kv_heads)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert model.config.num_key_value_heads == kv_heads
    assert model.model.layers[0].self_attn.k_proj.out_features == kv_heads * 16


def test_factory_caches_and_builds_deterministically(checkpoint_factory, tmp_path):
    from checkpoints import make_checkpoint

    assert checkpoint_factory("qwen3") == checkpoint_factory("qwen3")
    assert checkpoint_factory("qwen3", seed=9) != checkpoint_factory("qwen3")
    again = make_checkpoint(tmp_path / "again", "qwen3")
    first = checkpoint_factory("qwen3") / "model.safetensors"
    assert first.read_bytes() == (again / "model.safetensors").read_bytes()


def test_bfloat16_override(checkpoint_factory):
    checkpoint = checkpoint_factory("llama", dtype="bfloat16")
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(checkpoint / "model.safetensors", framework="pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16


def test_unknown_arch_is_rejected(tmp_path):
    from checkpoints import make_checkpoint

    with pytest.raises(ValueError, match="unknown arch"):
        make_checkpoint(tmp_path, "gpt2")
