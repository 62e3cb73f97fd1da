"""LFM2's short-convolution token mixer: gated by the input on both sides of a causal depthwise convolution
of a few taps, whose last inputs per sequence (the conv state, its only state) live in the engine's state pool.

``states`` ([S, hidden, K-1]) is bound by the model runner; the layer owns no state of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.linear import Linear
from bulkinfer.layers.step_conv import causal_conv1d_step


@dataclass(frozen=True)
class ShortConvShape:
    hidden_size: int
    conv_kernel: int  # taps of the convolution (LFM2's conv_L_cache)
    bias: bool  # the projections and the convolution have biases (conv_bias)


class ShortConv(nn.Module):
    """``out_proj(C * conv(B * x))``, with B, C and x the three thirds of ``in_proj``."""

    def __init__(self, shape: ShortConvShape):
        super().__init__()
        hidden = shape.hidden_size
        # Our Linear: oneDNN on the CPU, and batch-invariant in a deterministic engine.
        self.in_proj = Linear(hidden, 3 * hidden, bias=shape.bias)
        self.conv = nn.Conv1d(hidden, hidden, shape.conv_kernel, groups=hidden, bias=shape.bias)
        self.out_proj = Linear(hidden, hidden, bias=shape.bias)
        self.states: list[torch.Tensor] = []  # bound by the model runner: [conv windows]

    def state_specs(self) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """Per sequence: the convolution's last K-1 inputs."""
        channels, _, taps = self.conv.weight.shape
        return [((channels, taps - 1), self.conv.weight.dtype)]

    def prefill_scratch_bytes(self, tokens: int, seqs: int) -> int:
        """None: the convolution writes straight into its output."""
        return 0

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:  # [T, hidden] -> [T, hidden]
        b, c, inputs = self.in_proj(x).chunk(3, dim=-1)
        (conv_states,) = self.states
        mixed = causal_conv1d_step(b * inputs, self.conv.weight[:, 0], self.conv.bias, conv_states,
                                   attn.recurrent, activation=None)
        return self.out_proj(c * mixed)
