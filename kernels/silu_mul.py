"""SiLU(gate) * up over the fused gate/up projection of a gated MLP, or gpt-oss's clamped SwiGLU over it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._triton import Launch, jit, tl


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:  # x: [num_tokens, 2 * inter] -> [num_tokens, inter]
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)


def clamped_swiglu_ref(x: torch.Tensor, limit: float, alpha: float) -> torch.Tensor:
    """gpt-oss's experts' activation over the same [gate | up] layout: the gate clamped from above and
    the up projection on both sides at ``limit``, then ``(up + 1) * gate * sigmoid(alpha * gate)``."""
    gate, up = x.chunk(2, dim=-1)
    gate, up = gate.clamp(max=limit), up.clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


_BLOCK = 1024  # columns per program: wide enough to keep loads vectorized, small enough for many programs


@jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_stride, inter, limit, alpha, BLOCK: tl.constexpr, CLAMPED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_stride + inter + cols, mask=mask, other=0.0)
    if CLAMPED:  # gpt-oss: (clamp(up) + 1) * gate * sigmoid(alpha * gate), the gate clamped from above
        gate = tl.minimum(gate, limit)
        up = tl.minimum(tl.maximum(up.to(tl.float32), -limit), limit)
        out = (up + 1.0) * (gate * tl.sigmoid(gate * alpha))
    else:
        # Rounded to the input dtype before the product, as F.silu(gate) * up rounds in the reference.
        act = (gate * tl.sigmoid(gate)).to(up.dtype).to(tl.float32)
        out = act * up.to(tl.float32)
    tl.store(out_ptr + row * inter + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_triton(x: torch.Tensor,  # [num_tokens, 2 * inter] -> [num_tokens, inter]
                        clamped_swiglu: tuple[float, float] | None = None) -> torch.Tensor:
    """Triton version of :func:`silu_and_mul_ref`, or with ``clamped_swiglu`` (limit, alpha) of
    :func:`clamped_swiglu_ref`.

    Grid: ``(num_tokens, cdiv(inter, 1024))``; axis 0 is the row, axis 1 a 1024-column slice of
    it. Memory: reads ``2 * inter`` and writes ``inter`` elements per row.
    """
    shape, width = x.shape, x.shape[-1]
    if width % 2:
        raise ValueError(f"silu_and_mul needs an even last dimension (gate | up), got {width}")
    rows = x.reshape(-1, width)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    inter = width // 2
    out = torch.empty((rows.shape[0], inter), dtype=x.dtype, device=x.device)
    if rows.shape[0] > 0:
        silu_and_mul_launch(rows, out, clamped_swiglu)()
    return out.view(*shape[:-1], inter)


def silu_and_mul_launch(rows: torch.Tensor, out: torch.Tensor,
                        clamped_swiglu: tuple[float, float] | None = None) -> Launch:
    """The launch over ``rows`` [num_tokens, 2 * inter] into ``out``, decided without a device."""
    inter = out.shape[-1]
    limit, alpha = clamped_swiglu or (0.0, 1.0)
    return Launch(_silu_and_mul_kernel, (rows.shape[0], -(-inter // _BLOCK)),
                  (rows, out, rows.stride(0), inter, float(limit), float(alpha)),
                  {"BLOCK": _BLOCK, "CLAMPED": clamped_swiglu is not None})
