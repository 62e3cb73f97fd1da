"""Which token states make an embedding: the ``pooling`` setting, or the model's own sentence-transformers
Pooling config, so that an embedding model embeds as its authors trained it."""

from __future__ import annotations

import json
from pathlib import Path

from bulkinfer.models.refusal import UnsupportedModelError

# sentence-transformers' pooling modes -> ours; its older configs set one pooling_mode_* flag instead.
_MODES = {"lasttoken": "last", "mean": "mean", "cls": "cls"}
_LEGACY_FLAGS = {"pooling_mode_lasttoken": "lasttoken", "pooling_mode_mean_tokens": "mean",
                 "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                 "pooling_mode_weightedmean_tokens": "weightedmean"}


def pooling_method(setting: str, path: Path) -> str:
    """last, mean or cls: the setting, unless it is auto; then the Pooling module's config that the model's
    modules.json names, else last (a decoder's last token has read the whole text)."""
    if setting != "auto":
        return setting
    config = _pooling_config(path)
    if config is None:
        return "last"
    mode = config.get("pooling_mode") or [name for key, name in _LEGACY_FLAGS.items() if config.get(key)] or "mean"
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if not isinstance(mode, str) or mode not in _MODES:
        raise UnsupportedModelError(f"{path}: sentence-transformers pooling {mode!r} is not supported; bulkinfer "
                                    f"pools {', '.join(_MODES)} (set pooling to override)")
    return _MODES[mode]


def is_sentence_transformer(path: Path) -> bool:
    """Whether the checkpoint is a sentence-transformers model (it has modules.json): an embedding model."""
    return (path / "modules.json").is_file()


def _pooling_config(path: Path) -> dict | None:
    if not is_sentence_transformer(path):
        return None
    modules = json.loads((path / "modules.json").read_text())
    pooling = next((module for module in modules if module.get("type", "").endswith(".Pooling")), None)
    if pooling is None:
        return None
    config = path / pooling.get("path", "") / "config.json"
    return json.loads(config.read_text()) if config.is_file() else None
