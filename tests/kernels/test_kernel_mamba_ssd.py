"""Mamba2's scan: the reference against transformers' own, the CPU path and Triton against the reference."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from hybrid_testing import (EDGE_INITIAL, EDGE_LENGTHS, EDGE_SLOTS, INITIAL, LENGTHS, POOL, SLOTS,
                            allocated_fp32_bytes, assert_prefill_matches,
                            assert_two_calls_equal_one, step_layout, token_rows)  # noqa: E402
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402
from transformers.models.mamba2.modeling_mamba2 import (  # noqa: E402
    mamba2_chunk_scan,
    mamba2_selective_state_update,
)

from bulkinfer.kernels import mamba_ssd, state_blocks  # noqa: E402

HEADS, HEAD_DIM, GROUPS, STATE = 4, 8, 2, 16
TOKEN_INPUTS = ("x", "dt", "B", "C")


def _inputs(tokens: int, dtype: torch.dtype, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    case = dict(x=torch.randn(tokens, HEADS, HEAD_DIM, generator=gen),
                dt=torch.randn(tokens, HEADS, generator=gen) - 2,  # softplus -> steps around 0.1, as trained ones
                B=torch.randn(tokens, GROUPS, STATE, generator=gen), C=torch.randn(tokens, GROUPS, STATE, generator=gen))
    case = {name: x.to(DEVICE, dtype) for name, x in case.items()}
    case.update(A=-torch.rand(HEADS, generator=gen).mul(4).add(0.5).to(DEVICE),  # A = -exp(A_log), fp32 as loaded
                D=torch.randn(HEADS, generator=gen).to(DEVICE), dt_bias=torch.randn(HEADS, generator=gen).to(DEVICE),
                states=torch.randn(POOL, HEADS, HEAD_DIM, STATE, generator=gen).to(DEVICE))
    return case


def _params(case: dict) -> dict:
    return {name: case[name] for name in ("A", "D", "dt_bias")}


def _prefill(fn, case: dict, layout: dict) -> tuple[torch.Tensor, torch.Tensor]:
    states = case["states"].clone()
    return fn(**{name: case[name] for name in TOKEN_INPUTS}, **_params(case), states=states, **layout), states


def _update(fn, case: dict, rows: list[int], states: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    return fn(**{name: case[name][rows] for name in TOKEN_INPUTS}, **_params(case), states=states, slots=slots)


def test_reference_matches_transformers_chunk_scan():
    case, layout = _inputs(sum(LENGTHS), torch.float32), step_layout()
    y, states = _prefill(mamba_ssd.mamba_chunk_scan_ref, case, layout)
    starts = layout["query_start_loc"].tolist()
    for seq, (slot, initial) in enumerate(zip(SLOTS, INITIAL)):
        span = slice(starts[seq], starts[seq + 1])
        x, dt, B, C = (case[name][span][None] for name in TOKEN_INPUTS)
        expected, final = mamba2_chunk_scan(x, dt, case["A"], B, C, chunk_size=32, D=case["D"],
                                            dt_bias=case["dt_bias"], dt_softplus=True, return_final_states=True,
                                            initial_states=case["states"][slot][None] if initial else None)
        torch.testing.assert_close(y[span], expected[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(states[slot], final[0], atol=1e-4, rtol=1e-4)


def test_update_reference_matches_transformers():
    case = _inputs(len(SLOTS), torch.float32)
    slots = torch.tensor(SLOTS, device=DEVICE)
    states = case["states"].clone()
    y = _update(mamba_ssd.mamba_state_update_ref, case, list(range(len(SLOTS))), states, slots)
    expected_states = case["states"][slots].clone()
    # Per-channel parameters, laid out as transformers' Mamba2Mixer passes them.
    expected = mamba2_selective_state_update(expected_states, case["x"], case["dt"][..., None].expand(-1, -1, HEAD_DIM),
                                             case["A"][:, None, None].expand(-1, HEAD_DIM, STATE), case["B"], case["C"],
                                             case["D"][:, None].expand(-1, HEAD_DIM), dt_softplus=True,
                                             dt_bias=case["dt_bias"][:, None].expand(-1, HEAD_DIM))
    torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(states[slots], expected_states, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("fn", [mamba_ssd.mamba_chunk_scan, mamba_ssd.mamba_chunk_scan_triton], ids=["cpu", "triton"])
def test_prefill_matches_reference(fn, dtype):
    assert_prefill_matches(_prefill, fn, mamba_ssd.mamba_chunk_scan_ref, _inputs(sum(LENGTHS), dtype), step_layout())


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_chunked_triton_at_chunk_edges(dtype):
    assert_prefill_matches(_prefill, mamba_ssd.mamba_chunk_scan_triton, mamba_ssd.mamba_chunk_scan_ref,
                           _inputs(sum(EDGE_LENGTHS), dtype, seed=3),
                           step_layout(EDGE_LENGTHS, EDGE_SLOTS, EDGE_INITIAL))


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_chunked_triton_prefill_in_two_calls_equals_one(dtype):
    assert_two_calls_equal_one(_prefill, mamba_ssd.mamba_chunk_scan_triton, _inputs(sum(EDGE_LENGTHS), dtype, seed=4),
                               TOKEN_INPUTS)


UPDATES = {"cpu": (mamba_ssd.mamba_chunk_scan, mamba_ssd.mamba_state_update),
           "triton": (mamba_ssd.mamba_chunk_scan_triton, mamba_ssd.mamba_state_update_triton)}


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("path", UPDATES)
def test_prefill_then_decode_steps_equal_one_prefill(path, dtype):
    prefill, update = UPDATES[path]
    case = _inputs(sum(LENGTHS), dtype, seed=1)
    whole, whole_states = _prefill(prefill, case, step_layout())
    steps = 3
    decoding = [s for s, n in enumerate(LENGTHS) if n > steps]
    head_lengths = [n - steps if s in decoding else n for s, n in enumerate(LENGTHS)]
    head, _ = token_rows(LENGTHS, head_lengths)
    _, states = _prefill(prefill, {**case, **{name: case[name][head] for name in TOKEN_INPUTS}},
                         step_layout(head_lengths))
    starts = torch.tensor([0, *LENGTHS]).cumsum(0).tolist()
    slots = torch.tensor([SLOTS[s] for s in decoding], device=DEVICE)
    for step in range(steps):
        rows = [starts[s + 1] - steps + step for s in decoding]
        assert_close(_update(update, case, rows, states, slots), whole[rows])
    torch.testing.assert_close(states[slots], whole_states[slots], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("block_bytes", [None, 1], ids=["one-block", "a-block-per-sequence"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_update_paths_match_reference(dtype, block_bytes, monkeypatch):
    if block_bytes:  # the CPU path's blocks of sequences, as a large model's states make them
        monkeypatch.setattr(state_blocks, "BLOCK_BYTES", block_bytes)
    case = _inputs(len(SLOTS), dtype, seed=2)
    slots = torch.tensor(SLOTS, device=DEVICE)
    results = []
    for fn in (mamba_ssd.mamba_state_update_ref, mamba_ssd.mamba_state_update, mamba_ssd.mamba_state_update_triton):
        states = case["states"].clone()
        results.append((_update(fn, case, list(range(len(SLOTS))), states, slots), states))
    for y, states in results[1:]:
        assert_close(y, results[0][0])
        torch.testing.assert_close(states, results[0][1], atol=1e-4, rtol=1e-4)


def test_heads_not_divisible_by_groups_are_refused():
    case, layout = _inputs(sum(LENGTHS), torch.float32), step_layout()
    case["B"] = case["C"] = torch.zeros(sum(LENGTHS), 3, STATE, device=DEVICE)
    with pytest.raises(ValueError, match="H % G"):
        _prefill(mamba_ssd.mamba_chunk_scan, case, layout)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # chunks of 16 and of 32
def test_the_scratch_the_engine_sets_aside_is_what_the_prefill_allocates(dtype):
    case, layout = _inputs(sum(LENGTHS), dtype), step_layout()
    y = torch.empty_like(case["x"])
    launches = mamba_ssd.mamba_chunk_scan_launches(**{name: case[name] for name in TOKEN_INPUTS}, **_params(case),
                                                   states=case["states"], **layout, dt_softplus=True, y=y)
    allocated = allocated_fp32_bytes(launches, [*case.values(), *layout.values(), y])
    assert allocated > 0
    assert allocated == mamba_ssd.chunk_scratch_bytes(sum(LENGTHS), len(LENGTHS), HEADS, HEAD_DIM, STATE, dtype)
