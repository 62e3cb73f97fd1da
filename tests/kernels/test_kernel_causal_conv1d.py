"""Causal conv1d: the reference against transformers' own, the CPU path and Triton against the reference."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from hybrid_testing import POOL, SLOTS, step_layout, token_rows  # noqa: E402
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import causal_conv1d_fn, causal_conv1d_update  # noqa: E402

from bulkinfer.kernels import causal_conv1d as conv  # noqa: E402

CHANNELS, TAPS = 40, 4
LENGTHS = [5, 1, 9, 2]  # one shorter than K - 1: its new state keeps part of the stored one
INITIAL = [True, False, True, True]


def _case(dtype: torch.dtype, seed: int = 0, bias: bool = True) -> dict:
    gen = torch.Generator().manual_seed(seed)
    case = dict(x=torch.randn(sum(LENGTHS), CHANNELS, generator=gen), weight=torch.randn(CHANNELS, TAPS, generator=gen),
                bias=torch.randn(CHANNELS, generator=gen) if bias else None,
                conv_states=torch.randn(POOL, CHANNELS, TAPS - 1, generator=gen))
    case = {k: None if v is None else v.to(DEVICE, dtype) for k, v in case.items()}
    return {**case, **step_layout(LENGTHS, SLOTS, INITIAL)}


def _run(fn, case: dict, activation="silu") -> tuple[torch.Tensor, torch.Tensor]:
    states = case["conv_states"].clone()
    y = fn(case["x"], case["weight"], case["bias"], states, case["slots"], case["query_start_loc"],
           case["has_initial_state"], activation)
    return y, states


def test_reference_matches_transformers():
    case = _case(torch.float32)
    y, states = _run(conv.causal_conv1d_prefill_ref, case)
    bounds = case["query_start_loc"].tolist()
    for seq, (slot, initial) in enumerate(zip(SLOTS, INITIAL)):
        x = case["x"][bounds[seq]:bounds[seq + 1]].T[None]
        if initial:
            state = case["conv_states"][slot][None].clone()
            expected = causal_conv1d_update(x, state, case["weight"], case["bias"], "silu")
            torch.testing.assert_close(states[slot], state[0])
        else:
            expected = causal_conv1d_fn(x, case["weight"], case["bias"], "silu")
        torch.testing.assert_close(y[bounds[seq]:bounds[seq + 1]], expected[0].T)


@pytest.mark.parametrize("activation", ["silu", None])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("path", ["cpu", "triton"])
def test_prefill_matches_reference(path, dtype, activation):
    case = _case(dtype, bias=activation is not None)
    fn = conv.causal_conv1d_prefill_triton if path == "triton" else conv.causal_conv1d_prefill
    y, states = _run(fn, case, activation)
    y_ref, states_ref = _run(conv.causal_conv1d_prefill_ref, case, activation)
    assert_close(y, y_ref)
    assert_close(states, states_ref)  # unused slots untouched too


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("path", ["cpu", "triton"])
def test_prefill_then_decode_steps_equal_one_prefill(path, dtype):
    prefill = conv.causal_conv1d_prefill_triton if path == "triton" else conv.causal_conv1d_prefill
    update = conv.causal_conv1d_update_triton if path == "triton" else conv.causal_conv1d_update
    case = _case(dtype, seed=1)
    whole, whole_states = _run(prefill, case)
    steps = 2  # the last two tokens of the sequences longer than that, decoded one at a time
    head_lengths = [n - steps if n > steps else n for n in LENGTHS]
    head, _ = token_rows(LENGTHS, head_lengths)
    _, states = _run(prefill, {**case, "x": case["x"][head], **step_layout(head_lengths, SLOTS, INITIAL)})
    bounds = case["query_start_loc"].tolist()
    decoding = [s for s, n in enumerate(LENGTHS) if n > steps]
    for step in range(steps):
        rows = [bounds[s + 1] - steps + step for s in decoding]
        y = update(case["x"][rows], case["weight"], case["bias"], states, case["slots"][decoding])
        assert_close(y, whole[rows])
    assert_close(states[case["slots"][decoding]], whole_states[case["slots"][decoding]])


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_update_paths_match_reference(dtype):
    case = _case(dtype, seed=2)
    x = case["x"][:len(SLOTS)]
    results = []
    for fn in (conv.causal_conv1d_update_ref, conv.causal_conv1d_update, conv.causal_conv1d_update_triton):
        states = case["conv_states"].clone()
        results.append((fn(x, case["weight"], case["bias"], states, case["slots"]), states))
    for y, states in results[1:]:
        assert_close(y, results[0][0])
        assert_close(states, results[0][1])


def test_unknown_activation_is_refused():
    case = _case(torch.float32)
    with pytest.raises(ValueError, match="activation"):
        _run(conv.causal_conv1d_prefill, case, "gelu")
