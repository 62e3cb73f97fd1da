"""Find a checkpoint: a local directory, or a Hugging Face hub id fetched when the network allows."""

from __future__ import annotations

from pathlib import Path


class ModelNotFoundError(ValueError):
    pass


def resolve_model_path(model: str) -> Path:
    """A local checkpoint directory, or a hub id downloaded when the network allows."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{model}: directory has no config.json, so it is not a model checkpoint")
        return path
    if path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise ModelNotFoundError(f"{model}: no such model directory")
    return _download(model)


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt"]))
    except Exception as exc:  # the hub client raises many kinds; the user needs one line
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelNotFoundError(f"{repo_id}: not a local directory, and it could not be fetched from the "
                                 f"Hugging Face hub ({reason})") from None
