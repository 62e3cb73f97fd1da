"""The Triton kernels as a KernelOps: on CUDA compiled, on the CPU run by Triton's interpreter."""

from __future__ import annotations

import torch

from bulkinfer.layers.ops import KernelOps


def triton_ops(device: torch.device) -> KernelOps:
    """Kernels for ``device``; raises one clear line when Triton cannot run there."""
    try:
        import triton  # noqa: F401  (only to report its absence plainly)
    except ImportError as exc:
        raise RuntimeError(f"attention_backend='triton' needs the triton package, which failed to import: {exc}") from None
    from bulkinfer.kernels import _triton
    from bulkinfer.kernels.paged_attention import _decode_kernel, paged_attention_triton
    from bulkinfer.kernels.rms_norm import rms_norm_triton
    from bulkinfer.kernels.rotary import rotary_triton
    from bulkinfer.kernels.silu_mul import silu_and_mul_triton
    from bulkinfer.kernels.store_kv import store_kv_triton

    if device.type != "cuda" and not _triton.is_interpreted(_decode_kernel):
        # The kernels are compiled or interpreted when their module is imported, so the variable
        # must be set before bulkinfer is.
        raise RuntimeError(f"attention_backend='triton' on {device.type} runs in Triton's interpreter: "
                           "set TRITON_INTERPRET=1 before importing bulkinfer")
    return KernelOps("triton", store_kv_triton, paged_attention_triton, rms_norm_triton, rotary_triton,
                     silu_and_mul_triton)
