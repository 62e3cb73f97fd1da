"""Tiny checkpoints whose tokenizers carry a tool-calling family's special tokens and chat template, so
tool-call tests render real templates and parse real marker tokens. The templates are in
tests/data/chat_templates, each naming its source."""

from __future__ import annotations

from pathlib import Path

from checkpoints import build_tokenizer, make_checkpoint
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
# family: (template file, its tokens as the family's tokenizer adds them: (text, special)).
FAMILIES = {
    # Qwen 2.5 / Qwen3 add <tool_call> as a plain added token (special: false), ChatML's as special ones.
    "hermes": ("hermes_tools.jinja", [("<|im_start|>", True), ("<|im_end|>", True), ("<tool_call>", False),
                                      ("</tool_call>", False)]),
    "llama3_json": ("llama31_json_tools.jinja", [("<|start_header_id|>", True), ("<|end_header_id|>", True),
                                                 ("<|eot_id|>", True), ("<|python_tag|>", True)]),
    "mistral": ("mistral_tools.jinja", [("[INST]", True), ("[/INST]", True), ("[AVAILABLE_TOOLS]", True),
                                        ("[/AVAILABLE_TOOLS]", True), ("[TOOL_CALLS]", True),
                                        ("[TOOL_RESULTS]", True), ("[/TOOL_RESULTS]", True)]),
}


def tool_tokenizer(family: str) -> PreTrainedTokenizerFast:
    template, tokens = FAMILIES[family]
    tokenizer = build_tokenizer()
    tokenizer.add_tokens([AddedToken(text, special=special, normalized=False) for text, special in tokens])
    tokenizer.chat_template = (TEMPLATES / template).read_text()
    return tokenizer


def make_tool_checkpoint(path: Path, family: str) -> Path:
    """A random llama-architecture checkpoint with `family`'s tokenizer."""
    # Tool definitions make long prompts (about 1,000 tokens of this small vocabulary for two tools).
    return make_checkpoint(path, "llama", tokenizer=tool_tokenizer(family), max_position_embeddings=4096)
