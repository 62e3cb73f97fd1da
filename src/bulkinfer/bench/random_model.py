"""Checkpoints with random weights, for benchmarks that need a model of a given size: Llama-shaped,
Qwen3-MoE-shaped for the mixture-of-experts shapes, DeepSeek-V2-shaped for multi-head latent attention,
Qwen3.5-shaped (gated delta-net layers) for the hybrid; and any checkpoint wrapped as a sentence-transformers
embedding model, so that bulkinfer and sentence-transformers can embed with the same one."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    num_experts: int = 0  # 0: dense
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    kv_lora_rank: int = 0  # multi-head latent attention's latent width; 0: ordinary attention
    qk_rope_head_dim: int = 0  # with a latent: each head's rotary key part, beside head_dim's no-rotary part
    hybrid: bool = False  # three gated delta-net layers of every four, the fourth full attention


SHAPES = {
    "tiny": ModelShape(64, 2, 4, 2, 128, 1024),
    "50m": ModelShape(512, 8, 8, 4, 1408, 32000),
    "0.5b": ModelShape(896, 24, 14, 2, 4864, 151936),
    "1.5b": ModelShape(1536, 28, 12, 2, 8960, 151936),
    "8b": ModelShape(4096, 32, 32, 8, 14336, 128256),
    # 50m with each MLP split into 8 experts of half its width, 2 per token: the same active parameters.
    "moe-small": ModelShape(512, 8, 8, 4, 1408, 32000, num_experts=8, num_experts_per_tok=2,
                            moe_intermediate_size=704),
    # moe-small as DeepSeek-V2 builds it: multi-head latent attention (heads of 64 no-rotary + 32 rotary key dims
    # and 64 value dims over a 128-wide latent, about moe-small's attention parameters), and of its two active
    # experts one routed, one shared. Its latent and rotary key are 160 values per token per layer, against
    # moe-small's 512 keys and values.
    "mla-small": ModelShape(512, 8, 8, 8, 1408, 32000, num_experts=8, num_experts_per_tok=1,
                            moe_intermediate_size=704, kv_lora_rank=128, qk_rope_head_dim=32),
    # 50m with mla-small's latent attention and 50m's dense MLP: the latent cache against GQA without experts.
    "mla-50m": ModelShape(512, 8, 8, 8, 1408, 32000, kv_lora_rank=128, qk_rope_head_dim=32),
    # 50m with three layers of every four gated delta-net (linear attention): a fixed state per sequence.
    "hybrid-50m": ModelShape(512, 8, 8, 4, 1408, 32000, hybrid=True),
}


def make_random_checkpoint(path: Path, shape: ModelShape, dtype: str = "float32", seed: int = 0) -> Path:
    """Write a checkpoint of ``shape`` with a tokenizer covering its vocabulary: printable ASCII
    characters, so that structured outputs can spell JSON, then filler words."""
    import torch
    from transformers import AutoModelForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    if (path / "config.json").is_file():
        return path
    torch.manual_seed(seed)
    config = hf_config(shape, dtype)
    # Built in its own dtype, on the GPU when there is one: an 8B model in fp32 on the CPU would
    # take 32 GB and minutes to initialize.
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.save_pretrained(path)
    _word_tokenizer(shape.vocab_size).save_pretrained(path)
    return path


def make_sentence_transformer(path: str | Path, model_dir: str | Path, pooling_mode: str) -> Path:
    """A sentence-transformers model directory (modules.json, 1_Pooling/config.json, the decoder saved as a bare
    `*Model`) built on the checkpoint in `model_dir` with its own classes and save(). Its tokenizer has no chat
    template: sentence-transformers would otherwise render every text as a chat message before embedding it."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    plain = Path(path) / "plain-text-source"
    shutil.copytree(model_dir, plain)
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer_config = json.loads((plain / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    transformer = Transformer(str(plain))
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode)
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(path))
    shutil.rmtree(plain)
    return Path(path)


def hf_config(shape: ModelShape, dtype: str = "float32"):
    """A LlamaConfig; with experts a Qwen3MoeConfig (q/k norm, renormalized top-k weights); with a latent a
    DeepseekV2Config (with experts: greedy top-k over softmax scores, renormalized, one shared expert; without:
    every layer dense); for a hybrid a
    Qwen3_5TextConfig whose delta-net layers have half as many key heads as value heads, each head_dim wide."""
    from transformers import DeepseekV2Config, LlamaConfig, Qwen3_5TextConfig, Qwen3MoeConfig

    common = dict(max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0, dtype=dtype)
    head_dim = shape.hidden_size // shape.num_attention_heads
    if shape.kv_lora_rank:
        return DeepseekV2Config(**_dense(shape), **common, architectures=["DeepseekV2ForCausalLM"],
                                n_routed_experts=shape.num_experts, num_experts_per_tok=shape.num_experts_per_tok,
                                moe_intermediate_size=shape.moe_intermediate_size, n_shared_experts=1,
                                first_k_dense_replace=0 if shape.num_experts else shape.num_hidden_layers,
                                topk_method="greedy", norm_topk_prob=True, q_lora_rank=None,
                                kv_lora_rank=shape.kv_lora_rank, qk_nope_head_dim=head_dim,
                                qk_rope_head_dim=shape.qk_rope_head_dim, v_head_dim=head_dim)
    if shape.num_experts:
        return Qwen3MoeConfig(**_dense(shape), **common, num_experts=shape.num_experts,
                              num_experts_per_tok=shape.num_experts_per_tok,
                              moe_intermediate_size=shape.moe_intermediate_size, norm_topk_prob=True,
                              architectures=["Qwen3MoeForCausalLM"], head_dim=head_dim)
    if shape.hybrid:
        kinds = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(shape.num_hidden_layers)]
        return Qwen3_5TextConfig(**_dense(shape), **common, head_dim=head_dim, layer_types=kinds,
                                 linear_num_key_heads=shape.num_attention_heads // 2,
                                 linear_num_value_heads=shape.num_attention_heads, linear_key_head_dim=head_dim,
                                 linear_value_head_dim=head_dim, architectures=["Qwen3_5ForCausalLM"])
    return LlamaConfig(**_dense(shape), **common, architectures=["LlamaForCausalLM"])


def _dense(shape: ModelShape) -> dict:
    """The shape's sizes that every config class takes under the same names."""
    return {k: v for k, v in asdict(shape).items() if k not in ("num_experts", "num_experts_per_tok",
                                                                 "moe_intermediate_size", "kv_lora_rank",
                                                                 "qk_rope_head_dim", "hybrid")}


def _word_tokenizer(vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    characters = [chr(code) for code in range(32, 127)]
    fillers = [f"w{i}" for i in range(len(specials) + len(characters), vocab_size)]
    vocab = {token: i for i, token in enumerate(specials + characters + fillers)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one token per character
    tokenizer.decoder = decoders.Fuse()  # tokens joined as they are, no spaces between
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")
