"""What the hybrid models' recurrent-kernel tests share: a step of several sequences over a state pool."""

from __future__ import annotations

import torch

from kernel_testing import DEVICE

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
