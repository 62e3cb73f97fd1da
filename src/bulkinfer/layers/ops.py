"""The set of kernels a model runs with: the PyTorch references, the CPU path, or Triton's.

The CPU path is the references except for decode attention, which reads the paged cache through
a kernel compiled by TorchInductor where a step's decode groups are big enough to pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from bulkinfer.kernels.paged_attention import paged_attention_ref
from bulkinfer.kernels.paged_attention_cpu import paged_attention_cpu
from bulkinfer.kernels.rms_norm import rms_norm_ref
from bulkinfer.kernels.rotary import rotary_ref
from bulkinfer.kernels.silu_mul import silu_and_mul_ref
from bulkinfer.kernels.store_kv import store_kv_ref

ATTENTION_BACKENDS = ("auto", "torch", "triton")


@dataclass(frozen=True)
class KernelOps:
    """Every member has the signature of the reference function it is named after."""

    name: str
    store_kv: Callable
    paged_attention: Callable
    rms_norm: Callable
    rotary: Callable
    silu_and_mul: Callable


TORCH_OPS = KernelOps("torch", store_kv_ref, paged_attention_ref, rms_norm_ref, rotary_ref, silu_and_mul_ref)
CPU_OPS = KernelOps("cpu", store_kv_ref, paged_attention_cpu, rms_norm_ref, rotary_ref, silu_and_mul_ref)


def resolve_ops(attention_backend: str, device: torch.device) -> KernelOps:
    if attention_backend not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, "
                         f"got {attention_backend!r}")
    if attention_backend == "torch":
        return TORCH_OPS
    if attention_backend == "auto" and device.type == "cpu":
        return CPU_OPS
    from bulkinfer.layers.ops_triton import triton_ops

    return triton_ops(device)
