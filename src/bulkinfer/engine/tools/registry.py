"""The tool-call parsers by name (the `tool_call_parser` engine setting), and `auto`: the family whose
markers the chat template writes, else none."""

from __future__ import annotations

from typing import Any, Callable

from bulkinfer.engine.harmony import writes_harmony
from bulkinfer.engine.tools.base import ToolCallParser
from bulkinfer.engine.tools.harmony import HarmonyToolCallParser
from bulkinfer.engine.tools.hermes import HermesToolCallParser
from bulkinfer.engine.tools.llama3_json import Llama3JsonToolCallParser
from bulkinfer.engine.tools.mistral import MistralToolCallParser

PARSERS: dict[str, type[ToolCallParser]] = {
    parser.name: parser for parser in (HermesToolCallParser, Llama3JsonToolCallParser, MistralToolCallParser,
                                       HarmonyToolCallParser)}
TOOL_CALL_PARSERS = ("auto", *PARSERS, "none")

# In order, the first rule that holds for (chat template source, vocabulary) names the family; gpt_oss's rule
# goes first (its template writes none of the others' markers, but it is the most specific).
AUTO_RULES: list[tuple[str, Callable[[str, dict[str, int]], bool]]] = [
    ("gpt_oss", lambda template, vocab: writes_harmony(vocab)),
    ("mistral", lambda template, vocab: "[TOOL_CALLS]" in template or "[TOOL_CALLS]" in vocab),
    ("hermes", lambda template, vocab: "<tool_call>" in template),
    ("llama3_json", lambda template, vocab: "<|python_tag|>" in template
                                            or ("<|start_header_id|>" in template and "parameters" in template)),
]


def tool_call_parser(name: str, tokenizer: Any) -> ToolCallParser | None:
    """The parser `name` asks for (auto: the one the chat template's markers name), or None for none."""
    if name == "auto":
        name = auto_parser_name(tokenizer)
    if name == "none":
        return None
    if name not in PARSERS:
        raise ValueError(f"tool_call_parser {name!r} is not available; available: {', '.join(PARSERS)}")
    return PARSERS[name](tokenizer)


def auto_parser_name(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # several named templates: the default one writes the calls
        template = template.get("default", "") or ""
    vocab = tokenizer.get_vocab()
    return next((name for name, holds in AUTO_RULES if holds(template, vocab)), "none")
