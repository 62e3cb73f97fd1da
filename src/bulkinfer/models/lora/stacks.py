"""The model's LoRA slots: every adaptable projection of a native decoder wrapped in a LoRALinear, and
the writes that put one adapter in one slot of all of them.

Our projections are fused (q/k/v, gate/up), so an adapter's q_proj update fills only q's columns of
qkv_proj, and one on gate_proj only gate's half of gate_up_proj.
"""

from __future__ import annotations

import torch

from bulkinfer.layers.lora import StepLoRASlots, LoRALinear, LoRATarget
from bulkinfer.layers.mlp import MLP
from bulkinfer.models.llama import CausalLM
from bulkinfer.models.lora.adapter import AdapterError, LoRAAdapter


class LoRAStacks:
    def __init__(self, model: CausalLM, max_loras: int, max_rank: int):
        if model.config.hybrid is not None:
            raise ValueError("LoRA adapters on hybrid models (recurrent layers) are not supported")
        self.batch = StepLoRASlots()
        self.max_loras, self.max_rank = max_loras, max_rank
        self.targets: dict[tuple[int, str], LoRATarget] = {}  # (layer, projection) -> its slots
        weight = model.model.embed_tokens.weight
        self.dtype, self.device = weight.dtype, weight.device
        for index, layer in enumerate(model.model.layers):
            attn = layer.self_attn
            q, kv = attn.q_size, attn.kv_size
            attn.qkv_proj = self._wrap(index, attn.qkv_proj,
                                       {"q_proj": (0, q), "k_proj": (q, kv), "v_proj": (q + kv, kv)})
            attn.o_proj = self._wrap(index, attn.o_proj, {"o_proj": (0, attn.o_proj.out_features)})
            if isinstance(layer.mlp, MLP):  # a sparse MoE block's experts take no adapter
                mlp = layer.mlp
                half = mlp.gate_up_proj.out_features // 2
                mlp.gate_up_proj = self._wrap(index, mlp.gate_up_proj,
                                              {"gate_proj": (0, half), "up_proj": (half, half)})
                mlp.down_proj = self._wrap(index, mlp.down_proj, {"down_proj": (0, mlp.down_proj.out_features)})

    def _wrap(self, layer: int, base: torch.nn.Module, parts: dict[str, tuple[int, int]]) -> LoRALinear:
        """``base`` with a target per projection in ``parts`` (name: (its first output column, its columns))."""
        targets = {name: LoRATarget(base.in_features, start, size, self.max_loras, self.max_rank, self.dtype,
                                    self.device)
                   for name, (start, size) in parts.items()}
        self.targets.update({(layer, name): target for name, target in targets.items()})
        return LoRALinear(base, targets, self.batch)

    def check(self, adapter: LoRAAdapter) -> None:
        """AdapterError when the adapter updates a projection this model has no slot for (or of another size)."""
        for (layer, projection), (a, b) in adapter.weights.items():
            target = self.targets.get((layer, projection))
            if target is None:
                raise AdapterError(f"LoRA adapter {adapter.path}: layer {layer} {projection} is not a projection "
                                   f"of this model that takes an adapter")
            if a.shape[1] != target.lora_a.shape[2] or b.shape[0] != target.size:
                raise AdapterError(f"LoRA adapter {adapter.path}: layer {layer} {projection} is "
                                   f"{b.shape[0]}x{a.shape[1]}, the model's is {target.size}x{target.lora_a.shape[2]}")

    def write(self, slot: int, adapter: LoRAAdapter) -> None:
        """Put ``adapter`` in ``slot`` of every projection; the projections it leaves alone get zeros."""
        for key, target in self.targets.items():
            a, b = adapter.weights.get(key, (None, None))
            target.write(slot, a, b, adapter.scaling)
