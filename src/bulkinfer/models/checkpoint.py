"""Find a checkpoint: a local directory, or a Hugging Face hub id fetched when the network allows; and its
weight files, which are only ever safetensors (a pickled ``.bin`` can run code when it is read)."""

from __future__ import annotations

import json
from pathlib import Path


class ModelNotFoundError(ValueError):
    pass


def resolve_model_path(model: str, revision: str | None = None) -> Path:
    """A local checkpoint directory, or a hub id downloaded (at ``revision``) when the network allows. A
    revision with a local directory is refused: the directory holds one version, whichever was asked for."""
    path = Path(model).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ModelNotFoundError(f"{model}: a revision ({revision}) applies to hub ids, not local directories")
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{model}: directory has no config.json, so it is not a model checkpoint")
        return path
    if path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ModelNotFoundError(f"{model}: no such model directory")
    return _download(model, revision)


def _download(repo_id: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import snapshot_download

        patterns = ["*.json", "*.jinja", "*.safetensors", "*.model", "*.txt"]
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except Exception as exc:  # the hub client raises many kinds; the user needs one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelNotFoundError(f"{repo_id}: not a local directory, and it could not be fetched from the "
                                 f"Hugging Face hub ({reason})") from None


def safetensors_files(path: Path) -> list[str]:
    """The checkpoint's weight files, from its index or its directory. Weights only in pickles (``*.bin``,
    ``*.pt``) are refused without being opened, whichever code would load them."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    files = sorted(p.name for p in path.glob("*.safetensors"))
    if files:
        return files
    pickles = sorted(p.name for p in path.glob("*") if p.suffix in (".bin", ".pt", ".pth", ".ckpt"))
    found = f" (only {', '.join(pickles[:3])}: pickled weights, which bulkinfer does not read)" if pickles else ""
    raise ModelNotFoundError(f"{path}: no *.safetensors weights found{found}")
