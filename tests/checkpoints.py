"""Tiny random Hugging Face checkpoints, built locally so tests never download weights.

A checkpoint here is a directory that `AutoModelForCausalLM.from_pretrained` and
`AutoTokenizer.from_pretrained` both accept: config.json, generation_config.json,
safetensors weights (optionally sharded with an index) and a byte-level BPE tokenizer
trained on a small generated corpus. The weights are random but seeded, so a given
(arch, overrides) pair always yields the same tensors.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

import torch
from tokenizers import (
    Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers,
)
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    GenerationConfig,
    GraniteMoeHybridConfig,
    Lfm2Config,
    Lfm2MoeConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
    Qwen3NextConfig,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
)

from zoo import ZOO

BOS, EOS, EOT, PAD = "<s>", "</s>", "<|eot|>", "<pad>"
# transformers 5 loads any model_type "qwen2" checkpoint with Qwen2Tokenizer, which adds
# "<|endoftext|>" as its unk token if missing; having it in every checkpoint keeps the vocab
# identical across architectures.
UNK = "<|endoftext|>"
# Trained first, so they get ids 0..4 in this order.
SPECIAL_TOKENS = [PAD, BOS, EOS, EOT, UNK]
# Qwen2Tokenizer also rebuilds the normalizer and pre-tokenizer from fixed settings, so we train
# with exactly those (NFC, this split regex, byte-level without its own regex): every arch then
# tokenizes the same way whichever class AutoTokenizer picks.
SPLIT_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
               r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
TOKENIZER_VOCAB_TARGET = 700  # not a multiple of 8, so the model's vocab has padding rows

# Llama-style: BOS written by the template itself, so rendering then encoding with
# add_special_tokens=True would double it; callers must tokenize with add_special_tokens=False.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|eot|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

SIZES: dict[str, Any] = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    max_position_embeddings=512,
    # The HF default 0.02 gives near-uniform logits (std ~0.16) and greedy output stuck on one
    # token; 0.3 gives logit std ~2.4, varied greedy output and rare near-ties, while sampling
    # still has more than one likely token.
    initializer_range=0.3,
    rms_norm_eps=1e-6,
)

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

# arch -> (config class, settings on top of SIZES). `eos_list` means generation_config.json
# stops on both "</s>" and "<|eot|>", as Llama 3 and Qwen checkpoints do. Seeds differ so that
# llama and mistral (the same network) still get different weights.
ARCHS: dict[str, tuple[type, dict[str, Any]]] = {
    "llama": (LlamaConfig, dict(seed=0, tie_word_embeddings=False, eos_list=False)),
    "llama3": (LlamaConfig, dict(seed=1, tie_word_embeddings=True, eos_list=True,
                                 rope_theta=500000.0, rope_scaling=LLAMA3_ROPE)),
    # Mistral's config defaults to a 4096-token window; no window unless a test asks for one.
    "mistral": (MistralConfig, dict(seed=2, tie_word_embeddings=False, eos_list=False,
                                    sliding_window=None)),
    # Qwen2 always has q/k/v biases; its config has no switch for them.
    "qwen2": (Qwen2Config, dict(seed=3, tie_word_embeddings=True, eos_list=True,
                                rope_theta=1000000.0)),
    # Qwen3: q/k RMSNorm, and heads * head_dim (128) != hidden_size (64).
    "qwen3": (Qwen3Config, dict(seed=4, tie_word_embeddings=False, eos_list=True, head_dim=32,
                                rope_theta=1000000.0)),
    # Mixture of experts, top-2: Mixtral's experts are intermediate_size wide, renormalized weights.
    "mixtral": (MixtralConfig, dict(seed=5, tie_word_embeddings=False, eos_list=False, sliding_window=None,
                                    num_local_experts=4, num_experts_per_tok=2, intermediate_size=48)),
    # Qwen2-MoE: a shared expert with its sigmoid gate, unnormalized top-k weights, layer 1 dense.
    "qwen2_moe": (Qwen2MoeConfig, dict(seed=6, tie_word_embeddings=True, eos_list=True, rope_theta=1000000.0,
                                       num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                                       shared_expert_intermediate_size=80, norm_topk_prob=False,
                                       mlp_only_layers=[1])),
    # Qwen3-MoE: q/k norm, renormalized top-k weights, every layer sparse.
    "qwen3_moe": (Qwen3MoeConfig, dict(seed=8, tie_word_embeddings=False, eos_list=True, head_dim=32,
                                       rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2,
                                       moe_intermediate_size=32, norm_topk_prob=True)),
}
# Hybrids: three gated delta-net layers, then one full-attention layer (gated output, partial rotary), with more
# value heads than key heads; Qwen3-Next and Qwen3.5-MoE with routed experts and a gated shared expert.
_HYBRID = dict(num_hidden_layers=4, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
               linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4, tie_word_embeddings=False,
               eos_list=True, layer_types=["linear_attention"] * 3 + ["full_attention"])
_HYBRID_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
ARCHS.update({
    "qwen3_next": (Qwen3NextConfig, dict(seed=40, **_HYBRID, **_HYBRID_MOE, norm_topk_prob=True)),
    "qwen3_5": (Qwen3_5TextConfig, dict(seed=41, **_HYBRID)),
    "qwen3_5_moe": (Qwen3_5MoeTextConfig, dict(seed=42, **_HYBRID, **_HYBRID_MOE)),
})
# Granite 4.0-H: Mamba2 layers (heads sharing B and C in 2 groups) around one attention layer without rotary, as
# released; top-2 of 4 experts beside an ungated shared MLP; Granite's four multipliers. "granite_h_dense" has the
# shared MLP alone (Granite-4.0-H-Micro-like), rotary attention and tied embeddings.
_GRANITE_H = dict(num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "mamba"], mamba_n_heads=8,
                  mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
                  num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, shared_intermediate_size=48,
                  embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=2.0,
                  position_embedding_type="nope", tie_word_embeddings=False, eos_list=False)
ARCHS.update({
    "granite_h": (GraniteMoeHybridConfig, dict(seed=43, **_GRANITE_H)),
    "granite_h_dense": (GraniteMoeHybridConfig, dict(seed=44, **{**_GRANITE_H, "num_local_experts": 0,
                                                                   "position_embedding_type": "rope",
                                                                   "tie_word_embeddings": True})),
})
# LFM2: short-convolution layers (biased here, to cover the biases) around one attention layer with q/k norms,
# tied embeddings, and an MLP width by its own rule (int(2 * 128 / 3) = 85, times 0.75, up to a multiple of 32: 64).
ARCHS["lfm2"] = (Lfm2Config, dict(seed=43, num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "conv"],
                                  conv_bias=True, conv_L_cache=3, block_multiple_of=32, block_ffn_dim_multiplier=0.75,
                                  norm_eps=1e-5, eos_list=True))
# LFM2-MoE: a dense first layer, then experts chosen by sigmoid scores swayed by a per-expert bias (random here,
# zero as transformers builds it), the chosen scores renormalized and scaled by 1.5.
ARCHS["lfm2_moe"] = (Lfm2MoeConfig, dict(seed=44, num_hidden_layers=4, layer_types=["conv", "full_attention",
                                                                                     "conv", "conv"],
                                         num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=32, routed_scaling_factor=1.5, eos_list=True))
HYBRID_ARCHS = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "granite_h", "granite_h_dense", "lfm2", "lfm2_moe")
MOE_ARCHS = ("mixtral", "qwen2_moe", "qwen3_moe")

# Options make_checkpoint handles itself rather than passing to the config class.
_OWN_OPTIONS = ("eos_list", "sharded", "seed", "dtype", "vocab_size", "classifier")


@functools.lru_cache(maxsize=1)
def _trained_tokenizer_json() -> str:
    """Train once per process; the JSON is copied into every checkpoint."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_TARGET,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        # All 256 byte symbols, so any UTF-8 text (é, 日本, emoji) can be encoded.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]),
    ])
    return tokenizer.to_str()


def _corpus() -> list[str]:
    """A few thousand deterministic English-ish lines: digits, punctuation, some non-ASCII."""
    rng = random.Random(0)
    words = _WORDS.split() + [_pseudo_word(rng) for _ in range(150)]
    lines = [f"{i} + {i + 1} = {2 * i + 1}\n" for i in range(200)]
    for _ in range(4000):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        if rng.random() < 0.3:
            sentence += f" at {rng.randint(0, 23)}:{rng.randint(0, 59):02d}"
            sentence += f" in {rng.randint(1900, 2030)}"
        ending = rng.choice([".", "!", "?", "...", ";", ",", ":"])
        ending += rng.choice(["\n", " ", "\n\n"])
        lines.append(sentence[0].upper() + sentence[1:] + ending)
    return lines


def _pseudo_word(rng: random.Random) -> str:
    # Made-up words give BPE more distinct pieces to merge than a short word list alone.
    syllables = [rng.choice("bcdfghklmnprstvwz") + rng.choice("aeiou")
                 for _ in range(rng.randint(1, 3))]
    return "".join(syllables) + rng.choice(["", "n", "s", "r", "t"])


_WORDS = """
the a an and or but if then so because of to in on at by for with from about into over after
model user engine friend batch team scheduler request cache cat teacher city river house
book letter story question answer number file block result line weather apple menu output
token sequence prompt system assistant message time day year week morning night water light
read write answer count find send keep build load check return explain print sort store run
is are was were be been have has had do does did can could will would should may might must
good small large new old long short first last next early late quick slow happy bright dark
one two three four five six seven eight nine ten hundred thousand many few every some each
I you he she it we they me him her us them my your his its our their this that these those
café naïve résumé façade über 日本 東京 こんにちは 世界 Привет мир مرحبا
"""


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The shared test tokenizer, wrapped for transformers with special tokens and template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_tokenizer_json()),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        extra_special_tokens=[EOT],
        chat_template=CHAT_TEMPLATE,
        # Keeps " ." and " 's" as written, so decode(encode(text)) == text.
        clean_up_tokenization_spaces=False,
    )


def padded_vocab_size(tokenizer_size: int) -> int:
    """Round up to a multiple of 8, as real checkpoints pad the embedding for GEMM efficiency."""
    return (tokenizer_size + 7) // 8 * 8


def make_checkpoint(path: str | Path, arch: str, tokenizer: str | PreTrainedTokenizerFast | None = None,
                    **overrides: Any) -> Path:
    """Write a tiny random checkpoint of `arch` (a key of ARCHS or zoo.ZOO) into `path` and return it.

    Overrides go to the config class (e.g. num_key_value_heads=1, tie_word_embeddings=False),
    except these, which make_checkpoint handles itself:
      sharded: bool, write several shards plus model.safetensors.index.json (default False)
      seed: int, for torch.manual_seed (default: fixed per arch)
      dtype: "float32" | "bfloat16" | "float16", the saved weights' dtype (default "float32")
      eos_list: bool, generation_config.json stops on [eos, eot] rather than eos alone
      vocab_size: int, embedding rows (default: the tokenizer's size rounded up to a multiple of 8)
      classifier: bool, a `*ForSequenceClassification` checkpoint (its `score` head has num_labels rows, an
        override like id2label) instead of a causal LM
    `tokenizer`: the checkpoint's tokenizer when it is not build_tokenizer()'s: a tokenizer, or the name of a
    family of thinking_tokenizers.FAMILIES ("qwen3", "deepseek_r1"), its special tokens and chat template on
    the shared vocabulary.
    """
    builders = {**ARCHS, **ZOO}
    if arch not in builders:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(builders)}")
    path = Path(path)
    config_class, arch_settings = builders[arch]
    settings = {**SIZES, **arch_settings, **overrides}
    own = {key: settings.pop(key, None) for key in _OWN_OPTIONS}
    if isinstance(tokenizer, str):
        tokenizer = _family_tokenizer(tokenizer)
    tokenizer = tokenizer or build_tokenizer()
    vocab_size = own["vocab_size"] or padded_vocab_size(len(tokenizer))
    config = config_class(**settings, **_token_ids(tokenizer), vocab_size=vocab_size)
    model = _random_model(config, len(tokenizer), seed=own["seed"], dtype=own["dtype"] or "float32",
                          classifier=bool(own["classifier"]))
    model.generation_config = _generation_config(tokenizer, eos_list=bool(own["eos_list"]))
    model.save_pretrained(path, max_shard_size="200KB" if own["sharded"] else "50GB")
    tokenizer.save_pretrained(path)
    return path


def _family_tokenizer(family: str) -> PreTrainedTokenizerFast:
    from thinking_tokenizers import thinking_tokenizer  # it builds on this module's trained vocabulary

    return thinking_tokenizer(family)


def _token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    return dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)


def _random_model(config: Any, tokenizer_size: int, seed: int, dtype: str, classifier: bool = False) -> torch.nn.Module:
    torch.manual_seed(seed)
    model_class = AutoModelForSequenceClassification if classifier else AutoModelForCausalLM
    model = model_class.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        # Rows past the tokenizer exist only as padding. Zeroing them gives those ids a logit
        # of 0, far below the real maximum, so greedy decoding never emits an id the tokenizer
        # cannot decode.
        model.get_input_embeddings().weight[tokenizer_size:] = 0
        if not classifier:
            model.get_output_embeddings().weight[tokenizer_size:] = 0
        for name, buffer in model.named_buffers():
            if name.endswith(".expert_bias"):  # LFM2-MoE's router bias: zero as built, so it would sway nothing
                buffer.normal_(0.0, 0.3)
    return model.to(getattr(torch, dtype)).eval()


def _generation_config(tokenizer: PreTrainedTokenizerFast, eos_list: bool) -> GenerationConfig:
    eot_id = tokenizer.convert_tokens_to_ids(EOT)
    eos = [tokenizer.eos_token_id, eot_id] if eos_list else tokenizer.eos_token_id
    return GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos,
                            pad_token_id=tokenizer.pad_token_id)
