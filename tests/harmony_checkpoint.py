"""A tiny gpt-oss-style checkpoint: the shared test tokenizer with harmony's special tokens at gpt-oss's own ids,
and gpt-oss's chat template (tests/data/chat_templates/gpt_oss.jinja).

gpt-oss's tokenizer (o200k_harmony) puts its specials after a 199,998-token vocabulary, with reserved tokens in
the gaps; here the trained 700-token vocabulary is padded with unreachable filler entries up to that point, so
every marker has its real id and the model has gpt-oss's vocabulary size.
"""

from __future__ import annotations

import json
from pathlib import Path

from checkpoints import SIZES, UNK, _random_model, _trained_tokenizer_json
from tokenizers import AddedToken, Tokenizer
from transformers import GenerationConfig, LlamaConfig, PreTrainedTokenizerFast

TEMPLATE = Path(__file__).parent / "data" / "chat_templates" / "gpt_oss.jinja"
FIRST_SPECIAL_ID = 199998
VOCAB_SIZE = 201088  # gpt-oss's embedding rows
# From id 199998 on, as o200k_harmony numbers them.
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>", "<|reserved_200001|>", "<|return|>",
            "<|constrain|>", "<|reserved_200004|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>",
            "<|reserved_200009|>", "<|reserved_200010|>", "<|reserved_200011|>", "<|call|>", "<|reserved_200013|>"]
HARMONY_IDS = {token: FIRST_SPECIAL_ID + i for i, token in enumerate(SPECIALS)}
OWN_UNK = "<unk>"  # the shared tokenizer's "<|endoftext|>" is renamed: gpt-oss has its own at 199999


def build_harmony_tokenizer() -> PreTrainedTokenizerFast:
    spec = json.loads(_trained_tokenizer_json().replace(json.dumps(UNK), json.dumps(OWN_UNK)))
    spec["post_processor"] = None  # gpt-oss's tokenizer adds no BOS: its chat template writes every marker
    vocab = spec["model"]["vocab"]
    for filler in range(len(vocab), FIRST_SPECIAL_ID):
        vocab[f"<|filler_{filler}|>"] = filler
    backend = Tokenizer.from_str(json.dumps(spec))
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIALS])
    assert all(backend.token_to_id(token) == token_id for token, token_id in HARMONY_IDS.items())
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|startoftext|>", eos_token="<|return|>",
                                   pad_token="<|endoftext|>", unk_token=OWN_UNK, chat_template=TEMPLATE.read_text(),
                                   clean_up_tokenization_spaces=False)


def make_harmony_checkpoint(path: str | Path) -> Path:
    """A random Llama-shaped model with the harmony tokenizer; it stops on `<|return|>` and `<|call|>`, as
    gpt-oss's generation_config.json says."""
    path = Path(path)
    tokenizer = build_harmony_tokenizer()
    ids = dict(bos_token_id=HARMONY_IDS["<|startoftext|>"], pad_token_id=HARMONY_IDS["<|endoftext|>"],
               eos_token_id=HARMONY_IDS["<|return|>"])
    config = LlamaConfig(**SIZES, **ids, vocab_size=VOCAB_SIZE, tie_word_embeddings=True)
    model = _random_model(config, len(tokenizer), seed=30, dtype="float32")
    model.generation_config = GenerationConfig(**{**ids, "eos_token_id": [
        HARMONY_IDS["<|return|>"], HARMONY_IDS["<|call|>"], HARMONY_IDS["<|endoftext|>"]]})
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
