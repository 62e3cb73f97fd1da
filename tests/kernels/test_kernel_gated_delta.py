"""The gated delta rule: the reference against transformers' own, the CPU path and Triton against the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from hybrid_testing import (EDGE_INITIAL, EDGE_LENGTHS, EDGE_SLOTS, INITIAL, LENGTHS, POOL, SLOTS,
                            allocated_fp32_bytes, assert_prefill_matches,
                            assert_two_calls_equal_one, step_layout, token_rows)  # noqa: E402
from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import (  # noqa: E402
    torch_chunk_gated_delta_rule,
    torch_recurrent_gated_delta_rule,
)

from bulkinfer.kernels import gated_delta_rule as gdr, state_blocks  # noqa: E402

HEADS, DK, DV = 2, 16, 8
SCALE = DK ** -0.5  # what transformers uses


def _inputs(tokens: int, dtype: torch.dtype, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    case = dict(q=F.normalize(torch.randn(tokens, HEADS, DK, generator=gen), dim=-1),
                k=F.normalize(torch.randn(tokens, HEADS, DK, generator=gen), dim=-1),
                v=torch.randn(tokens, HEADS, DV, generator=gen),
                g=F.logsigmoid(torch.randn(tokens, HEADS, generator=gen) + 2),  # decays near 1, as trained ones are
                beta=torch.rand(tokens, HEADS, generator=gen))
    case = {name: x.to(DEVICE, dtype) for name, x in case.items()}
    case["states"] = torch.randn(POOL, HEADS, DK, DV, generator=gen).to(DEVICE)
    return case


def _prefill(fn, case: dict, layout: dict) -> tuple[torch.Tensor, torch.Tensor]:
    states = case["states"].clone()
    out = fn(case["q"], case["k"], case["v"], case["g"], case["beta"], states, **layout, scale=SCALE)
    return out, states


def _update(fn, case: dict, rows: list[int], states: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    return fn(*(case[name][rows] for name in ("q", "k", "v", "g", "beta")), states, slots, scale=SCALE)


@pytest.mark.parametrize("transformers_fn", [torch_recurrent_gated_delta_rule, torch_chunk_gated_delta_rule])
def test_reference_matches_transformers(transformers_fn):
    case, layout = _inputs(sum(LENGTHS), torch.float32), step_layout()
    out, states = _prefill(gdr.chunk_gated_delta_rule_ref, case, layout)
    starts = layout["query_start_loc"].tolist()
    for seq, (slot, initial) in enumerate(zip(SLOTS, INITIAL)):
        span = slice(starts[seq], starts[seq + 1])
        expected, final = transformers_fn(*(case[name][span][None] for name in ("q", "k", "v", "g", "beta")),
                                          initial_state=case["states"][slot][None] if initial else None,
                                          output_final_state=True)
        torch.testing.assert_close(out[span], expected[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(states[slot], final[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("fn", [gdr.chunk_gated_delta_rule, gdr.chunk_gated_delta_rule_triton], ids=["cpu", "triton"])
def test_prefill_matches_reference(fn, dtype):
    assert_prefill_matches(_prefill, fn, gdr.chunk_gated_delta_rule_ref, _inputs(sum(LENGTHS), dtype), step_layout())


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_chunked_triton_at_chunk_edges(dtype):
    assert_prefill_matches(_prefill, gdr.chunk_gated_delta_rule_triton, gdr.chunk_gated_delta_rule_ref,
                           _inputs(sum(EDGE_LENGTHS), dtype, seed=3),
                           step_layout(EDGE_LENGTHS, EDGE_SLOTS, EDGE_INITIAL))


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_chunked_triton_prefill_in_two_calls_equals_one(dtype):
    assert_two_calls_equal_one(_prefill, gdr.chunk_gated_delta_rule_triton, _inputs(sum(EDGE_LENGTHS), dtype, seed=4),
                               ("q", "k", "v", "g", "beta"))


UPDATES = {"cpu": (gdr.chunk_gated_delta_rule, gdr.fused_recurrent_gated_delta_rule_update),
           "triton": (gdr.chunk_gated_delta_rule_triton, gdr.fused_recurrent_gated_delta_rule_update_triton)}


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("path", UPDATES)
def test_prefill_then_decode_steps_equal_one_prefill(path, dtype):
    prefill, update = UPDATES[path]
    case = _inputs(sum(LENGTHS), dtype, seed=1)
    whole, whole_states = _prefill(prefill, case, step_layout())
    steps = 3
    decoding = [s for s, n in enumerate(LENGTHS) if n > steps]
    head, _ = token_rows(LENGTHS, [n - steps if s in decoding else n for s, n in enumerate(LENGTHS)])
    head_lengths = [n - steps if s in decoding else n for s, n in enumerate(LENGTHS)]
    _, states = _prefill(prefill, {**{name: case[name][head] for name in ("q", "k", "v", "g", "beta")},
                                   "states": case["states"]}, step_layout(head_lengths))
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
    for fn in (gdr.fused_recurrent_gated_delta_rule_update_ref, gdr.fused_recurrent_gated_delta_rule_update,
               gdr.fused_recurrent_gated_delta_rule_update_triton):
        states = case["states"].clone()
        results.append((_update(fn, case, list(range(len(SLOTS))), states, slots), states))
    for out, states in results[1:]:
        assert_close(out, results[0][0])
        torch.testing.assert_close(states, results[0][1], atol=1e-4, rtol=1e-4)


def test_mismatched_heads_are_refused():
    case, layout = _inputs(sum(LENGTHS), torch.float32), step_layout()
    case["v"] = case["v"].repeat_interleave(2, dim=1)  # GVA not expanded by the caller
    with pytest.raises(ValueError, match="repeat q and k"):
        _prefill(gdr.chunk_gated_delta_rule, case, layout)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # chunks of 16 and of 32
def test_the_scratch_the_engine_sets_aside_is_what_the_prefill_allocates(dtype):
    case, layout = _inputs(sum(LENGTHS), dtype), step_layout()
    out = torch.empty_like(case["v"])
    launches = gdr.chunk_gated_delta_rule_launches(*(case[name] for name in ("q", "k", "v", "g", "beta", "states")),
                                                   **layout, scale=SCALE, out=out)
    allocated = allocated_fp32_bytes(launches, [*case.values(), *layout.values(), out])
    assert allocated > 0
    assert allocated == gdr.chunk_scratch_bytes(sum(LENGTHS), len(LENGTHS), HEADS, DK, DV, dtype)
