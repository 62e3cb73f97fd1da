"""The set of kernels a model runs with: the PyTorch references, the CPU path, or Triton's.

The CPU path is the references except for decode attention, which reads the paged cache through
a kernel compiled by TorchInductor where a step's decode groups are big enough to pay for it, the
mixture-of-experts MLP, whose per-expert matmuls go through oneDNN with weights packed once
(layers/moe_cpu.py), and rotary embedding, which in 16-bit dtypes rotates in fewer passes.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import Callable

import torch

from bulkinfer.kernels.fused_moe import fused_moe_ref
from bulkinfer.kernels.mla_decode import mla_decode_ref
from bulkinfer.kernels.paged_attention import paged_attention_ref
from bulkinfer.kernels.paged_attention_cpu import paged_attention_cpu
from bulkinfer.kernels.paged_attention_invariant import paged_attention_invariant
from bulkinfer.kernels.rms_norm import rms_norm_ref
from bulkinfer.kernels.rotary import rotary_cpu, rotary_ref
from bulkinfer.kernels.silu_mul import silu_and_mul_ref
from bulkinfer.kernels.store_kv import store_kv_ref
from bulkinfer.kernels.target import MIN_ARCH, check_supported, device_target
from bulkinfer.layers.moe_cpu import fused_moe_cpu

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelOps:
    """Every member has the signature of the reference function it is named after."""

    name: str
    store_kv: Callable
    paged_attention: Callable
    rms_norm: Callable
    rotary: Callable
    silu_and_mul: Callable
    fused_moe: Callable
    mla_decode: Callable  # multi-head latent attention's absorbed decode


TORCH_OPS = KernelOps("torch", store_kv_ref, paged_attention_ref, rms_norm_ref, rotary_ref, silu_and_mul_ref,
                      fused_moe_ref, mla_decode_ref)
CPU_OPS = KernelOps("cpu", store_kv_ref, paged_attention_cpu, rms_norm_ref, rotary_cpu, silu_and_mul_ref,
                    fused_moe_cpu, mla_decode_ref)


def resolve_ops(attention_backend: str, device: torch.device, batch_invariant: bool = False) -> KernelOps:
    """attention_backend: "torch" (the references), "triton", or "auto" (the CPU path on the CPU, else Triton).

    ``batch_invariant``: attention whose result for a token depends on its own sequence alone
    (kernels/paged_attention_invariant.py off the GPU, the extend kernel for every row on it).
    """
    ops = _resolve_ops(attention_backend, device)
    if not batch_invariant:
        return ops
    if ops.name == "triton":
        return replace(ops, paged_attention=functools.partial(ops.paged_attention, batch_invariant=True))
    return replace(ops, name=f"{ops.name}-invariant", paged_attention=paged_attention_invariant)


def _resolve_ops(attention_backend: str, device: torch.device) -> KernelOps:
    if attention_backend == "torch":
        return TORCH_OPS
    if attention_backend == "auto" and device.type == "cpu":
        return CPU_OPS
    if attention_backend == "auto" and device.type == "cuda" and device_target(device).arch < MIN_ARCH:
        logger.warning("this GPU (%s) is older than the Triton kernels support: the torch backend runs",
                       device_target(device).name)
        return TORCH_OPS
    return triton_ops(device)


def triton_ops(device: torch.device) -> KernelOps:
    """The Triton kernels: on CUDA compiled, on the CPU run by Triton's interpreter. Raises one clear
    line when Triton cannot run there."""
    try:
        import triton  # noqa: F401  (only to report its absence plainly)
    except ImportError as exc:
        raise RuntimeError(f"attention_backend='triton' needs the triton package, which failed to import: {exc}") from None
    from bulkinfer.kernels import _triton
    from bulkinfer.kernels.fused_moe import fused_moe_triton
    from bulkinfer.kernels.mla_decode import mla_decode_triton
    from bulkinfer.kernels.paged_attention import _decode_kernel, paged_attention_triton
    from bulkinfer.kernels.rms_norm import rms_norm_triton
    from bulkinfer.kernels.rotary import rotary_triton
    from bulkinfer.kernels.silu_mul import silu_and_mul_triton
    from bulkinfer.kernels.store_kv import store_kv_triton

    check_supported(device_target(device))
    if device.type != "cuda" and not _triton.is_interpreted(_decode_kernel):
        # The kernels are compiled or interpreted when their module is imported, so the variable
        # must be set before bulkinfer is.
        raise RuntimeError(f"attention_backend='triton' on {device.type} runs in Triton's interpreter: "
                           "set TRITON_INTERPRET=1 before importing bulkinfer")
    return KernelOps("triton", store_kv_triton, paged_attention_triton, rms_norm_triton, rotary_triton,
                     silu_and_mul_triton, fused_moe_triton, mla_decode_triton)
