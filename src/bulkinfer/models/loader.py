"""Find a checkpoint, build our model for it, and read its safetensors straight into our layout."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import torch
from safetensors import safe_open

from bulkinfer.layers.ops import KernelOps
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.llama import CausalLM


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


def read_config(path: Path) -> tuple[ModelConfig, dict]:
    hf = json.loads((path / "config.json").read_text())
    return ModelConfig.from_hf(hf), hf


def load_model(path: Path, config: ModelConfig, dtype: torch.dtype, device: torch.device,
               ops: KernelOps, max_position: int) -> CausalLM:
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = CausalLM(config, ops, max_position)
    finally:
        torch.set_default_dtype(default_dtype)
    load_weights(model, path)
    return model.eval()


# Checkpoint tensor name -> (our fused parameter, which part of it).
_FUSED = [
    (re.compile(r"(.*)\.self_attn\.([qkv])_proj\.(weight|bias)$"), r"\1.self_attn.qkv_proj.\3"),
    (re.compile(r"(.*)\.mlp\.(gate|up)_proj\.weight$"), r"\1.mlp.gate_up_proj.weight"),
]


def load_weights(model: CausalLM, path: Path) -> None:
    params = dict(model.named_parameters())
    filled = dict.fromkeys(params, 0)  # elements written per parameter, to find what is missing
    for name, tensor in _checkpoint_tensors(path):
        if "rotary_emb" in name or (name == "lm_head.weight" and model.config.tie_word_embeddings):
            continue
        target, rows = _target(name, model.config)
        if target not in params:
            raise ValueError(f"checkpoint tensor {name} has no place in {model.config.architecture}")
        part = params[target].data if rows is None else params[target].data[rows]
        if part.shape != tensor.shape:
            raise ValueError(f"checkpoint tensor {name} has shape {tuple(tensor.shape)}, "
                             f"expected {tuple(part.shape)}")
        part.copy_(tensor)
        filled[target] += part.numel()
    missing = [name for name, param in params.items() if filled[name] < param.numel()]
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {', '.join(missing[:3])}")


def _target(name: str, config: ModelConfig) -> tuple[str, slice | None]:
    """Our parameter for a checkpoint tensor, and the row range it fills in a fused one."""
    for pattern, replacement in _FUSED:
        match = pattern.match(name)
        if match:
            which = match.group(2)
            return pattern.sub(replacement, name), _fused_rows(which, config)
    return name, None


def _fused_rows(which: str, config: ModelConfig) -> slice:
    q, kv, inter = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim, config.intermediate_size
    starts = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv), "gate": (0, inter), "up": (inter, inter)}
    start, size = starts[which]
    return slice(start, start + size)


def _checkpoint_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise ModelNotFoundError(f"{path}: no *.safetensors weights found")
    for file in files:
        with safe_open(str(path / file), framework="pt") as handle:
            for name in handle.keys():
                yield name, handle.get_tensor(name)
