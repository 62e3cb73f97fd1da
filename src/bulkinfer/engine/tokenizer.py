"""The checkpoint's tokenizer and the token ids that end a generation."""

from __future__ import annotations

import json
from pathlib import Path

from bulkinfer.models.checkpoint import ModelNotFoundError, resolve_model_path
from bulkinfer.models.refusal import refuse_tokenizer_code


def tokenizer_path(model_path: Path, tokenizer: str | None) -> Path:
    """Where the tokenizer is: the model's directory, or the `tokenizer` setting's directory or hub id."""
    if tokenizer is None:
        return model_path
    path = Path(tokenizer).expanduser()
    if path.is_dir():
        return path
    if path.exists() or tokenizer.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"{tokenizer}: no such tokenizer directory")
    return resolve_model_path(tokenizer)


def load_tokenizer(path: Path, **options):
    """The checkpoint's tokenizer, built by transformers' own code only; ``options`` go to from_pretrained."""
    from transformers import AutoTokenizer

    refuse_tokenizer_code(path)
    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, **options)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: the tokenizer could not be loaded ({str(exc).splitlines()[0]})") from None


def eos_token_ids(path: Path, hf_config: dict, tokenizer) -> set[int]:
    """EOS ids from generation_config.json, config.json and the tokenizer; each may hold several."""
    ids: set[int] = set()
    generation_config = path / "generation_config.json"
    sources = [hf_config.get("eos_token_id"), tokenizer.eos_token_id]
    if generation_config.is_file():
        sources.append(json.loads(generation_config.read_text()).get("eos_token_id"))
    for value in sources:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    return ids
