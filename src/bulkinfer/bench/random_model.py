"""Llama-shaped checkpoints with random weights, for benchmarks that need a model of a given size."""

from __future__ import annotations

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


SHAPES = {
    "tiny": ModelShape(64, 2, 4, 2, 128, 1024),
    "50m": ModelShape(512, 8, 8, 4, 1408, 32000),
    "0.5b": ModelShape(896, 24, 14, 2, 4864, 151936),
    "1.5b": ModelShape(1536, 28, 12, 2, 8960, 151936),
    "8b": ModelShape(4096, 32, 32, 8, 14336, 128256),
}


def make_random_checkpoint(path: Path, shape: ModelShape, dtype: str = "float32", seed: int = 0) -> Path:
    """Write a LlamaForCausalLM checkpoint with a tokenizer covering its vocabulary: printable ASCII
    characters, so that structured outputs can spell JSON, then filler words."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    if (path / "config.json").is_file():
        return path
    torch.manual_seed(seed)
    config = LlamaConfig(**asdict(shape), max_position_embeddings=4096, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, dtype=dtype)
    # Built in its own dtype, on the GPU when there is one: an 8B model in fp32 on the CPU would
    # take 32 GB and minutes to initialize.
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.save_pretrained(path)
    _word_tokenizer(shape.vocab_size).save_pretrained(path)
    return path


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
