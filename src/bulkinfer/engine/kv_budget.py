"""How many KV-cache blocks fit: on a GPU, from gpu_memory_utilization and what the largest step needs.

The pool takes what is left of this process's share of the GPU (``gpu_memory_utilization`` of
its total memory, less what is already in use: the weights, other processes) once the largest
step's activations are set aside. That step is bounded by the token budget for hidden states
and projections, and by LOGIT_SLICE_ROWS rows of vocabulary for logits (engine/step_logits.py
computes them in slices), so the reserve is computed rather than guessed.
"""

from __future__ import annotations

import torch

from bulkinfer.engine.resolve import ResolvedConfig
from bulkinfer.engine.step_logits import LOGIT_SLICE_ROWS
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.models.config import ModelConfig

GIB = 1 << 30
_SLACK = GIB // 2  # the CUDA graphs' pool, Triton's and the allocator's own


def activation_reserve(model: ModelConfig, config: ResolvedConfig, tp_size: int) -> int:
    """Bytes the largest step may hold at once besides weights and the KV pool."""
    element = torch.tensor([], dtype=config.dtype).element_size()
    # Live at the widest point of a layer: the residual, the normed input, the fused qkv or gate/up
    # output and the attention or MLP output.
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim // tp_size
    width = 3 * model.hidden_size + max(qkv, 2 * model.intermediate_size // tp_size)
    tokens = config.max_num_batched_tokens * width * element
    # fp32 logits, their log_softmax and a comparison mask of one slice, plus the sampled rows.
    rows = LOGIT_SLICE_ROWS + config.options.max_num_seqs
    logits = 3 * rows * model.vocab_size * 4
    return tokens + logits + _SLACK


def kv_bytes_per_token(kv_shapes: list[KVShape], dtype: torch.dtype) -> int:
    """A token's keys and values (or latent rows) over every layer, in a cache of ``dtype``."""
    return sum(shape.values_per_token for shape in kv_shapes) * torch.tensor([], dtype=dtype).element_size()


def kv_blocks_that_fit(config: ResolvedConfig, model: ModelConfig, kv_shapes: list[KVShape],
                       block_size: int, device: torch.device, tp_size: int = 1, state_bytes: int = 0,
                       scratch_bytes: int = 0) -> int:
    """kv_shapes: each layer's cache on this rank; state_bytes: the recurrent state
    pool of a hybrid model, which is set aside first (every running sequence needs its slot);
    scratch_bytes: what its kernels allocate in the largest step beside the activations (on a GPU)."""
    bytes_per_block = block_size * kv_bytes_per_token(kv_shapes, config.kv_cache_dtype)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        # What is already used counts against our share; the largest step's activations are set aside.
        share = free - total * (1 - config.options.gpu_memory_utilization)
        budget = share - activation_reserve(model, config, tp_size) - scratch_bytes
    else:
        budget = config.options.kv_cache_memory_gb * GIB / tp_size  # the ranks share one budget
    budget -= state_bytes
    useful = config.options.max_num_seqs * -(-config.max_model_len // block_size) + 1
    return max(0, min(int(budget // bytes_per_block), useful))
