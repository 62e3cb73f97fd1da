"""RMSNorm, optionally fused with the residual add that precedes it in every decoder layer.

With a residual: ``residual = x + residual; out = rms_norm(residual)``, returning both, which is
the pattern of pre-norm transformers (the sum feeds the next residual branch).
"""

from __future__ import annotations

import torch


def rms_norm_ref(
    x: torch.Tensor,  # [num_tokens, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
    residual: torch.Tensor | None = None,  # [num_tokens, hidden]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if residual is not None:
        x = x + residual
        residual = x
    # Computed in fp32 and cast back before the weight, as Hugging Face's Llama does.
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype), residual
