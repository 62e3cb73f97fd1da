"""The reasoning parsers by name (the ``reasoning_parser`` engine setting), and ``auto``: the family read from
the tokenizer's vocabulary and chat template."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError
from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.harmony import writes_harmony
from bulkinfer.engine.reasoning.base import ReasoningParser
from bulkinfer.engine.reasoning.harmony import HarmonyReasoningParser
from bulkinfer.engine.reasoning.think_tags import END_TAG, START_TAG, DeepSeekR1Parser, Qwen3Parser
from bulkinfer.engine.tokenizer import load_tokenizer, tokenizer_path

log = logging.getLogger(__name__)

PARSERS: dict[str, type[ReasoningParser]] = {
    DeepSeekR1Parser.name: DeepSeekR1Parser,
    Qwen3Parser.name: Qwen3Parser,
    HarmonyReasoningParser.name: HarmonyReasoningParser,
}
_PROBE = [{"role": "user", "content": "hello"}]


def reasoning_parser(name: str, tokenizer: Any) -> ReasoningParser | None:
    """The parser the setting names (``auto``: the family's, if recognised); None for none."""
    if name == "auto":
        name = auto_parser_name(tokenizer)
        if name != "none":
            log.info("reasoning parser: %s (from the tokenizer and chat template)", name)
    if name == "none":
        return None
    if name not in PARSERS:
        raise ValueError(f"reasoning_parser {name!r} is not available in this build")
    return PARSERS[name](tokenizer)


def has_reasoning_parser(model_path: Path, options: EngineConfig) -> bool:
    """Whether the engine would run this model with a reasoning parser (its tokenizer is loaded to tell)."""
    if options.reasoning_parser != "auto":
        return options.reasoning_parser != "none"
    return auto_parser_name(load_tokenizer(tokenizer_path(model_path, options.tokenizer))) != "none"


def auto_parser_name(tokenizer: Any) -> str:
    """gpt_oss when the vocabulary has harmony's markers; deepseek_r1 when the chat template opens ``<think>``
    in the generation prompt, qwen3 when the template knows the tags but leaves the opening to the model (both
    need the tags as tokens of the vocabulary). Anything else: none."""
    vocabulary = tokenizer.get_vocab()
    if writes_harmony(vocabulary):
        return HarmonyReasoningParser.name
    if START_TAG not in vocabulary or END_TAG not in vocabulary:
        return "none"
    try:
        template = ChatTemplate(tokenizer)
        prompt = template.render(_PROBE)
    except ChatTemplateError:
        return "none"
    if prompt.rstrip().endswith(START_TAG):
        return "deepseek_r1"
    if START_TAG in template.source or "enable_thinking" in template.source:
        return "qwen3"
    return "none"
