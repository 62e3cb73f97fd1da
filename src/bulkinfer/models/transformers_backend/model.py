"""A transformers causal LM behind the interface of bulkinfer's own models (models/llama.py's CausalLM)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.layers.linear import Linear
from bulkinfer.layers.ops import KernelOps
from bulkinfer.layers.parallel import SINGLE
from bulkinfer.models.checkpoint import ModelNotFoundError
from bulkinfer.models.config import ModelConfig, UnsupportedModelError
from bulkinfer.models.transformers_backend.attention import (
    ATTENTION_NAME,
    LayerCache,
    Step,
    UnsupportedAttentionError,
    register,
    running,
)

PROBE_TOKENS = 8


class TransformersCausalLM(nn.Module):
    """Hidden states for every new token from transformers' decoder; logits only for the rows the sampler needs."""

    def __init__(self, hf_model: nn.Module, config: ModelConfig, ops: KernelOps):
        super().__init__()
        self.hf_model = hf_model
        self.config = config
        self.ops = ops
        self.tp = SINGLE
        self.caches = self._probe()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                attn: AttentionMetadata) -> torch.Tensor:  # [T] -> hidden [T, hidden]
        with running(Step(attn, self.ops, self.caches)):
            return self._decoder(input_ids, positions)

    def _decoder(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.hf_model.base_model(input_ids=input_ids[None], position_ids=positions[None], use_cache=False)
        return out.last_hidden_state[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, hidden] -> [N, vocab] fp32, with the scalings some families apply after the LM head."""
        config = self.hf_model.config
        logits = self.hf_model.get_output_embeddings()(hidden)
        if getattr(config, "logit_scale", None):  # Cohere
            logits = logits * config.logit_scale
        if getattr(config, "logits_scaling", None):  # Granite
            logits = logits / config.logits_scaling
        cap = getattr(config, "final_logit_softcapping", None)  # Gemma 2 and 3
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def attention_layers(self) -> list[LayerCache]:
        return self.caches

    def kv_shapes(self) -> list[KVShape]:
        """Each layer's cache: some families change its heads and head size from layer to layer."""
        return [KVShape(cache.kv_heads, cache.head_dim) for cache in self.caches]

    @torch.inference_mode()
    def _probe(self) -> list[LayerCache]:
        """Run one short sequence to learn each layer's cache shape and check what the paged path
        cannot see from the config: that every layer's attention comes here, once, in a form the
        kernels take, and that compute_logits gives the model's own logits."""
        param = next(self.hf_model.parameters())
        tokens = torch.arange(1, PROBE_TOKENS + 1, device=param.device) % self.config.vocab_size
        positions = torch.arange(PROBE_TOKENS, device=param.device)
        one = torch.tensor([0, PROBE_TOKENS], dtype=torch.int32, device=param.device)
        attn = AttentionMetadata(positions.clone(), one, one[1:], torch.zeros(1, 1, dtype=torch.int32,
                                 device=param.device), PROBE_TOKENS, PROBE_TOKENS, PROBE_TOKENS)
        step = Step(attn, self.ops, {}, probing=True)
        with running(step):
            hidden = self._decoder(tokens, positions)
            step.probing = False
            expected = self.hf_model(input_ids=tokens[None], position_ids=positions[None], use_cache=False).logits[0]
        layers = sorted(step.layers_seen)
        if layers != list(range(self.config.num_layers)):
            raise UnsupportedModelError(f"unsupported architecture {self.config.architecture}: attention ran in "
                                        f"layers {layers}, not once in each of its {self.config.num_layers}")
        if not torch.allclose(self.compute_logits(hidden), expected.float(), atol=1e-3, rtol=1e-3):
            raise UnsupportedModelError(f"unsupported architecture {self.config.architecture}: its LM head "
                                        "post-processes logits in a way bulkinfer does not reproduce")
        return [LayerCache(step.caches[i].kv_heads, step.caches[i].head_dim) for i in layers]


def load_transformers_model(path: Path, config: ModelConfig, dtype: torch.dtype, device: torch.device,
                            ops: KernelOps) -> TransformersCausalLM:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    register()
    transformers_logging.disable_progress_bar()  # the engine reports its own progress
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=ATTENTION_NAME,
                                                        trust_remote_code=False)
    except OSError as exc:  # no weights, or unreadable ones
        raise ModelNotFoundError(f"{path}: {str(exc).splitlines()[0]}") from None
    finally:
        transformers_logging.enable_progress_bar()
    hf_model = hf_model.to(device).eval().requires_grad_(False)
    for module in hf_model.modules():
        if type(module) is nn.Linear:  # the engine's linear layer: oneDNN on the CPU, 2.5x MKL for decode
            module.__class__ = Linear
    try:
        return TransformersCausalLM(hf_model, config, ops)
    except UnsupportedAttentionError as exc:
        raise UnsupportedModelError(f"unsupported architecture {config.architecture}: {exc}") from None
