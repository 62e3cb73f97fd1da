"""RMSNorm, optionally fused with the residual add that precedes it in every decoder layer.

With a residual: ``residual = x + residual; out = rms_norm(residual)``, returning both, which is
the pattern of pre-norm transformers (the sum feeds the next residual branch).
"""

from __future__ import annotations

import torch

from ._triton import Launch, jit, next_power_of_2, tl


def rms_norm_ref(
    x: torch.Tensor,  # [num_tokens, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
    residual: torch.Tensor | None = None,  # [num_tokens, hidden]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if residual is not None:
        x = x + residual
        residual = x
    # Computed in fp32 and cast back before the weight, as Hugging Face's Llama does. This is also the
    # CPU path: its products go in place into tensors made here (a 16-bit x's fp32 copy, then the cast),
    # never into an fp32 x itself, which the caller still holds; the same values, in half the passes.
    x32 = x.float()
    inv_rms = x32.square().mean(-1, keepdim=True).add_(eps).rsqrt_()
    normed = (x32 * inv_rms if x32 is x else x32.mul_(inv_rms)).to(x.dtype)
    if torch.promote_types(weight.dtype, normed.dtype) != normed.dtype:
        return weight * normed, residual
    return normed.mul_(weight), residual


@jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr,
    x_stride, residual_stride, hidden, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * residual_stride + cols, mask=mask, other=0.0)
        # Rounded to the input dtype before it is stored and normed, as the reference's `x + residual`.
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * hidden + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x32 * x32, axis=0) / hidden + eps)
    normed = (x32 * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * hidden + cols, (weight * normed).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm_triton(
    x: torch.Tensor,  # [..., hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
    residual: torch.Tensor | None = None,  # same shape and dtype as x
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Triton version of :func:`rms_norm_ref`, residual add fused (one read of x and residual).

    Grid: ``(num_rows,)``; axis 0 is the row, normed whole by one program (the row's sum of
    squares needs all of it). Memory per row: reads x, the residual if any, and the weight (cached
    across rows); writes the output and, with a residual, the new residual.
    """
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual {tuple(residual.shape)} {residual.dtype} does not match "
                         f"x {tuple(x.shape)} {x.dtype}")
    shape, hidden = x.shape, x.shape[-1]
    rows = _rows(x, hidden)
    out = torch.empty(rows.shape, dtype=torch.promote_types(weight.dtype, x.dtype), device=x.device)
    has_residual = residual is not None
    # Without a residual the kernel never touches these pointers; any tensor will do.
    res_in = _rows(residual, hidden) if has_residual else rows
    res_out = torch.empty(rows.shape, dtype=x.dtype, device=x.device) if has_residual else out
    if rows.shape[0] > 0:
        rms_norm_launch(rows, res_in, weight.contiguous(), out, res_out, eps, has_residual)()
    return out.view(shape), res_out.view(shape) if has_residual else None


def rms_norm_launch(rows: torch.Tensor, res_in: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
                    res_out: torch.Tensor, eps: float, has_residual: bool) -> Launch:
    """The launch over ``rows`` [num_rows, hidden], decided without a device."""
    hidden = rows.shape[-1]
    block = next_power_of_2(hidden)
    return Launch(_rms_norm_kernel, (rows.shape[0],),
                  (rows, res_in, weight, out, res_out, rows.stride(0), res_in.stride(0), hidden, eps),
                  {"HAS_RESIDUAL": has_residual, "BLOCK": block, "num_warps": min(16, max(1, block // 512))})


def _rows(x: torch.Tensor, hidden: int) -> torch.Tensor:
    # The kernel needs unit stride along hidden and one stride between rows; reshape keeps a view
    # when it can.
    rows = x.reshape(-1, hidden)
    return rows if rows.stride(-1) == 1 else rows.contiguous()
