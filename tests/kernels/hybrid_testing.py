"""What the hybrid models' recurrent-kernel tests share: a step of several sequences over a state pool."""

from __future__ import annotations

import torch

from kernel_testing import DEVICE, assert_close

LENGTHS = [70, 1, 9, 130]  # over one chunk of 64, a single token, under a chunk, several chunks
SLOTS = [4, 0, 6, 2]  # out of order, with unused slots between
INITIAL = [True, False, True, False]  # a later chunk of a chunked prefill continues from its slot
POOL = 7
# Around the chunked Triton kernels' chunks (16 tokens for fp32 inputs, 32 for 16-bit ones): a token,
# a chunk less one, a chunk and one, two and a half chunks.
EDGE_LENGTHS = [1, 15, 17, 31, 33, 80]
EDGE_SLOTS = [5, 0, 3, 6, 1, 2]
EDGE_INITIAL = [True, False, False, True, True, False]


def step_layout(lengths: list[int] = LENGTHS, slots: list[int] = SLOTS, initial: list[bool] = INITIAL) -> dict:
    """slots, query_start_loc and has_initial_state for sequences of ``lengths`` in one step."""
    return dict(slots=torch.tensor(slots, device=DEVICE),
                query_start_loc=torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                                             device=DEVICE),
                has_initial_state=torch.tensor(initial, device=DEVICE))


def token_rows(lengths: list[int], keep: list[int]) -> tuple[list[int], list[int]]:
    """The step's rows of each sequence's first ``keep[s]`` tokens, and those of the rest."""
    starts = torch.tensor([0, *lengths]).cumsum(0).tolist()
    head = [starts[s] + t for s in range(len(lengths)) for t in range(keep[s])]
    tail = [starts[s] + t for s in range(len(lengths)) for t in range(keep[s], lengths[s])]
    return head, tail


def allocated_fp32_bytes(launches: list, given: list[torch.Tensor]) -> int:
    """Bytes of the fp32 tensors ``launches`` take that are none of ``given``: the scratch their builder allocated."""
    given_at = {t.data_ptr() for t in given}
    scratch = {arg.data_ptr(): arg.numel() * arg.element_size() for launch in launches for arg in launch.args
               if isinstance(arg, torch.Tensor) and arg.dtype == torch.float32 and arg.data_ptr() not in given_at}
    return sum(scratch.values())


def assert_prefill_matches(prefill, fn, reference, case: dict, layout: dict) -> None:
    """``fn``'s prefill of the step against ``reference``'s: the outputs, and every slot of the pool (unused slots
    untouched too). ``prefill(fn, case, layout)`` -> (outputs, states) runs one kernel on a test's inputs."""
    out, states = prefill(fn, case, layout)
    out_ref, states_ref = prefill(reference, case, layout)
    assert_close(out, out_ref)
    torch.testing.assert_close(states, states_ref, atol=1e-4, rtol=1e-4)


def assert_two_calls_equal_one(prefill, fn, case: dict, token_inputs: tuple[str, ...]) -> None:
    """The EDGE_LENGTHS step prefilled in two calls, each sequence split mid-chunk (one with no first part) and
    the second call continuing from the first's states, equals the step in one call."""
    whole, whole_states = prefill(fn, case, step_layout(EDGE_LENGTHS, EDGE_SLOTS, EDGE_INITIAL))
    first_lengths = [n // 2 for n in EDGE_LENGTHS]
    head, tail = token_rows(EDGE_LENGTHS, first_lengths)
    first, states = prefill(fn, {**case, **{name: case[name][head] for name in token_inputs}},
                            step_layout(first_lengths, EDGE_SLOTS, EDGE_INITIAL))
    second, states = prefill(fn, {**case, **{name: case[name][tail] for name in token_inputs}, "states": states},
                             step_layout([n - m for n, m in zip(EDGE_LENGTHS, first_lengths)], EDGE_SLOTS,
                                         [True] * len(EDGE_LENGTHS)))
    assert_close(first, whole[head])
    assert_close(second, whole[tail])
    torch.testing.assert_close(states, whole_states, atol=1e-4, rtol=1e-4)
