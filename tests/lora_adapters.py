"""Random LoRA adapters for the tiny checkpoints, made and saved by the peft package itself, and the
reference each one is checked against: transformers' model with the adapter merged in by peft."""

from __future__ import annotations

from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(base: Path, out: Path, rank: int, seed: int, targets: list[str] = PROJECTIONS,
                 **config) -> Path:
    """A PEFT adapter on ``targets`` whose A and B are both random (init_lora_weights=False), so it changes
    the model's output; ``config``: more LoraConfig fields (lora_alpha, use_rslora, use_dora, ...)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    lora = LoraConfig(r=rank, target_modules=targets, init_lora_weights=False, **{"lora_alpha": 2 * rank, **config})
    get_peft_model(model, lora).save_pretrained(out)
    return out


def merged_model(base: Path, adapter: Path | None) -> torch.nn.Module:
    """transformers' eager model in fp32, with ``adapter`` merged into its weights (None: the base model)."""
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model.eval()
