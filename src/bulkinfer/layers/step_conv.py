"""The causal convolution of a recurrent layer over one step's batch, its window per sequence in the state pool.

Every recurrent token mixer here (gated delta-net, Mamba2, short convolution) convolves its input first: decoding
sequences advance by one batched update, prefilling ones (first or later chunks) go through the prefill
kernel, which continues from the pool where ``has_initial_state`` says so.
"""

from __future__ import annotations

import torch

from bulkinfer.kernels.causal_conv1d import causal_conv1d_prefill, causal_conv1d_update
from bulkinfer.layers.attention_metadata import RecurrentBatch


def causal_conv1d_step(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, conv_states: torch.Tensor,
                       batch: RecurrentBatch, activation: str | None) -> torch.Tensor:
    """x [T, C] -> [T, C]: each row convolved with its sequence's earlier inputs (weight [C, K]); the
    sequences' last K-1 inputs are written to their slots of ``conv_states`` [S, C, K-1]."""
    out = torch.empty_like(x)
    if batch.decode_rows.numel():
        rows = batch.decode_rows
        out[rows] = causal_conv1d_update(x[rows], weight, bias, conv_states, batch.decode_slots, activation)
    if batch.prefill_rows.numel():
        rows = batch.prefill_rows
        out[rows] = causal_conv1d_prefill(x[rows], weight, bias, conv_states, batch.prefill_slots,
                                          batch.prefill_query_start_loc, batch.prefill_has_initial_state,
                                          activation)
    return out
