"""One LoRA adapter read from a PEFT directory (adapter_config.json + adapter_model.safetensors).

What bulkinfer runs: low-rank updates of the attention and MLP projections (q, k, v, o, gate, up,
down) of a decoder's layers, scaled by lora_alpha / r (or lora_alpha / sqrt(r) with use_rslora).
Anything else an adapter may carry changes the model in ways these slots cannot hold (new
embeddings or an LM head, DoRA's magnitudes, trained biases, rank or alpha patterns); such an
adapter is refused in one line, naming what it carries.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_TENSOR = re.compile(rf"layers\.(\d+)\.(?:self_attn|mlp)\.({'|'.join(PROJECTIONS)})\.lora_([AB])\.weight$")
_CONFIG, _WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


class AdapterError(ValueError):
    """An adapter bulkinfer cannot run, with the one-line reason."""


@dataclass
class LoRAAdapter:
    path: str
    rank: int
    scaling: float
    # (layer, projection) -> (A [rank, in], B [out, rank]), fp32 on the CPU
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]


def load_adapter(path: str | Path, max_rank: int) -> LoRAAdapter:
    """The adapter in ``path``; AdapterError naming the problem when it cannot run here."""
    path = Path(path).expanduser()
    config = _read_config(path)
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise AdapterError(f"LoRA adapter {path}: r must be a positive integer, got {rank!r}")
    if rank > max_rank:
        raise AdapterError(f"LoRA adapter {path}: rank {rank} is above max_lora_rank ({max_rank}); "
                           f"raise max_lora_rank")
    alpha = config.get("lora_alpha", 8)
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    return LoRAAdapter(str(path), rank, scaling, _read_weights(path, rank))


def _read_config(path: Path) -> dict:
    file = path / _CONFIG
    if not file.is_file():
        raise AdapterError(f"LoRA adapter {path}: no {_CONFIG} there (a PEFT adapter directory is wanted)")
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"LoRA adapter {path}: {_CONFIG} cannot be read ({exc})") from None
    reason = _refusal(config)
    if reason:
        raise AdapterError(f"LoRA adapter {path}: {reason}")
    return config


def _refusal(config: dict) -> str | None:
    """Why an adapter's config asks for something bulkinfer does not run; None if it does not."""
    if config.get("peft_type", "LORA") != "LORA":
        return f"peft_type {config['peft_type']} (bulkinfer runs LORA adapters)"
    if config.get("use_dora"):
        return "DoRA adapters (use_dora) are not supported"
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        return "trained biases (bias or lora_bias) are not supported"
    if config.get("modules_to_save"):
        return f"modules_to_save ({', '.join(config['modules_to_save'])}) are not supported"
    for key in ("rank_pattern", "alpha_pattern"):
        if config.get(key):
            return f"{key} (per-module ranks or alphas) is not supported"
    targets = config.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else targets
    refused = [t for t in targets if any(word in t for word in ("embed", "lm_head"))]
    if refused:
        return f"adapters on embeddings or the LM head ({', '.join(refused)}) are not supported"
    return None


def _read_weights(path: Path, rank: int) -> dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]:
    file = path / _WEIGHTS
    if not file.is_file():
        raise AdapterError(f"LoRA adapter {path}: no {_WEIGHTS} there")
    try:
        tensors = load_file(str(file))
    except Exception as exc:  # noqa: BLE001 - safetensors' own errors for a damaged file
        raise AdapterError(f"LoRA adapter {path}: {_WEIGHTS} cannot be read ({exc})") from None
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        match = _TENSOR.search(name)
        if match is None:
            raise AdapterError(f"LoRA adapter {path}: tensor {name} is not a LoRA update of "
                               f"{', '.join(PROJECTIONS)}; only those are supported")
        layer, projection, half = match.groups()
        halves.setdefault((int(layer), projection), {})[half] = tensor.float()
    weights = {}
    for key, pair in halves.items():
        if set(pair) != {"A", "B"} or pair["A"].shape[0] != rank or pair["B"].shape[1] != rank:
            raise AdapterError(f"LoRA adapter {path}: layer {key[0]} {key[1]} lacks lora_A or lora_B of rank {rank}")
        weights[key] = (pair["A"], pair["B"])
    if not weights:
        raise AdapterError(f"LoRA adapter {path}: {_WEIGHTS} holds no LoRA weights")
    return weights
