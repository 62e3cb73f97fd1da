"""Test tokenizers of thinking-model families: the shared trained vocabulary plus each family's real special
tokens and its real chat template (tests/data/chat_templates/, sources in its README).

As in the published tokenizers, ``<think>`` and ``</think>`` are added tokens that are not special, so they
stay in decoded text; the role markers are special.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Tokenizer
from transformers import PreTrainedTokenizerFast

from checkpoints import PAD, UNK, _trained_tokenizer_json

TEMPLATES = Path(__file__).resolve().parent / "data" / "chat_templates"


@dataclass(frozen=True)
class Family:
    template: str  # file in TEMPLATES
    bos: str | None
    eos: str
    special: tuple[str, ...]  # added special tokens, in their published order
    plain: tuple[str, ...] = ("<think>", "</think>")  # added tokens that decode as text


FAMILIES = {
    "qwen3": Family("qwen3.jinja", None, "<|im_end|>", ("<|im_start|>", "<|im_end|>"),
                    ("<tool_call>", "</tool_call>", "<think>", "</think>")),
    "deepseek_r1": Family("deepseek_r1.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                          ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>")),
}


def thinking_tokenizer(family: str) -> PreTrainedTokenizerFast:
    spec = FAMILIES[family]
    tokenizer = Tokenizer.from_str(_trained_tokenizer_json())
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in spec.special])
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in spec.plain])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=spec.bos, eos_token=spec.eos, pad_token=PAD, unk_token=UNK,
        chat_template=(TEMPLATES / spec.template).read_text(), clean_up_tokenization_spaces=False)
