"""The grouped LoRA shrink and expand (Triton and the CPU path) against the per-token references."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close  # noqa: E402

from bulkinfer.kernels.lora import (  # noqa: E402
    lora_expand,
    lora_expand_ref,
    lora_expand_triton,
    lora_shrink,
    lora_shrink_ref,
    lora_shrink_triton,
    token_groups,
)
from bulkinfer.kernels.lora_cpu import lora_expand_cpu, lora_shrink_cpu  # noqa: E402

SHRINKS = {"triton": lora_shrink_triton,
           "cpu": lambda x, lora_a, batch, scale=1.0: lora_shrink_cpu(x, lora_a, batch.cpu_groups(), scale)}
EXPANDS = {"triton": lora_expand_triton,
           "cpu": lambda y, lora_b, batch, out, scaling: lora_expand_cpu(y, lora_b, batch.cpu_groups(), out, scaling)}


def make_adapters(num_slots: int, ranks: list[int], hidden: int, out_features: int, dtype, seed: int = 0):
    """Slot s holds an adapter of rank ranks[s], padded with zeros to the largest rank."""
    gen = torch.Generator().manual_seed(seed)
    max_rank = max(ranks)
    lora_a = torch.zeros(num_slots, max_rank, hidden)
    lora_b = torch.zeros(num_slots, out_features, max_rank)
    for slot, rank in enumerate(ranks):
        lora_a[slot, :rank] = torch.randn(rank, hidden, generator=gen) / hidden ** 0.5
        lora_b[slot, :, :rank] = torch.randn(out_features, rank, generator=gen) / rank ** 0.5
    scaling = torch.tensor([2.0 / rank for rank in ranks])  # alpha / r with alpha 2
    return lora_a.to(DEVICE, dtype), lora_b.to(DEVICE, dtype), scaling.to(DEVICE)


LAYOUTS = ["scattered", "sorted", "mixed"]


def random_slots(num_tokens: int, num_slots: int, seed: int = 0, layout: str = "scattered") -> torch.Tensor:
    """Slots and base-model tokens (-1): each token's drawn alone ("scattered", as decode tokens),
    the same "sorted" by slot, or the first 60% in runs of 1 to 40 tokens and the rest scattered
    ("mixed", as prefill chunks beside decode tokens)."""
    gen = torch.Generator().manual_seed(seed)
    scattered = torch.randint(-1, num_slots, (num_tokens,), generator=gen, dtype=torch.int32)
    if layout == "sorted":
        scattered = scattered.sort().values
    elif layout == "mixed":
        lengths = torch.randint(1, 41, (num_tokens,), generator=gen)
        in_runs = num_tokens * 3 // 5
        scattered[:in_runs] = scattered.repeat_interleave(lengths)[:in_runs]
    return scattered.to(DEVICE)


# (tokens, hidden, out_features, ranks per slot): decode-sized and prefill-sized batches, ranks 8..64,
# sizes no power of two.
CASES = [
    pytest.param(7, 64, 96, [8, 16, 8], id="decode"),
    pytest.param(150, 96, 200, [16, 8, 64, 32], id="prefill"),
    pytest.param(33, 72, 40, [64], id="one-slot"),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", ["triton", "cpu"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("num_tokens,hidden,out_features,ranks", CASES)
def test_shrink_matches_reference(layout, path, dtype, num_tokens, hidden, out_features, ranks):
    lora_a, _, _ = make_adapters(len(ranks), ranks, hidden, out_features, dtype)
    x = torch.randn(num_tokens, hidden, device=DEVICE).to(dtype)
    slots = random_slots(num_tokens, len(ranks), layout=layout)
    expected = lora_shrink_ref(x, lora_a, slots, scale=0.5)
    y = SHRINKS[path](x, lora_a, token_groups(slots), scale=0.5)
    assert_close(y, expected)
    assert not y[slots.cpu() < 0].any()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("path", ["triton", "cpu"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("num_tokens,hidden,out_features,ranks", CASES)
def test_expand_into_a_column_slice_matches_reference(layout, path, dtype, num_tokens, hidden, out_features, ranks):
    """``out`` is the middle part of a merged projection's output: the columns around it stay as
    they were, and so do the rows of base-model tokens. ``y`` is one part of a shrink over the
    parts' stacked A matrices: a column slice too."""
    _, lora_b, scaling = make_adapters(len(ranks), ranks, hidden, out_features, dtype)
    rank = max(ranks)
    y = torch.randn(num_tokens, 3 * rank, device=DEVICE).to(dtype)[:, rank:2 * rank]
    slots = random_slots(num_tokens, len(ranks), layout=layout)
    merged = torch.randn(num_tokens, out_features + 48, device=DEVICE).to(dtype)
    expected = merged.clone()
    lora_expand_ref(y, lora_b, slots, expected[:, 16:16 + out_features], scaling)
    before = merged.clone()
    EXPANDS[path](y, lora_b, token_groups(slots), merged[:, 16:16 + out_features], scaling)
    assert_close(merged, expected)
    assert torch.equal(merged[:, :16], before[:, :16]) and torch.equal(merged[:, 16 + out_features:],
                                                                       before[:, 16 + out_features:])
    assert torch.equal(merged[slots < 0], before[slots < 0])


def test_one_batch_serves_every_projection_and_raw_slots_work_too():
    """A LoRABatch built once gives the same results as raw slots, projection after projection."""
    lora_a, lora_b, scaling = make_adapters(3, [8, 16, 16], 64, 48, torch.float32)
    x = torch.randn(20, 64, device=DEVICE)
    slots = random_slots(20, 3, seed=1)
    batch = token_groups(slots)
    for _ in range(2):
        y = lora_shrink(x, lora_a, batch)
        assert_close(y, lora_shrink(x, lora_a, slots))
        out, out_raw = torch.zeros(20, 48, device=DEVICE), torch.zeros(20, 48, device=DEVICE)
        lora_expand(y, lora_b, batch, out, scaling)
        lora_expand(y, lora_b, slots, out_raw, scaling)
        assert_close(out, out_raw)


@pytest.mark.parametrize("path", ["triton", "cpu"])
def test_a_batch_of_base_model_tokens_only_changes_nothing(path):
    lora_a, lora_b, scaling = make_adapters(2, [8, 8], 32, 32, torch.float32)
    slots = torch.full((5,), -1, dtype=torch.int64, device=DEVICE)
    x = torch.randn(5, 32, device=DEVICE)
    assert not SHRINKS[path](x, lora_a, token_groups(slots)).any()
    out = torch.randn(5, 32, device=DEVICE)
    before = out.clone()
    EXPANDS[path](torch.randn(5, 8, device=DEVICE), lora_b, token_groups(slots), out, scaling)
    assert torch.equal(out, before)


def test_shapes_that_do_not_match_are_refused_in_one_line():
    lora_a, lora_b, scaling = make_adapters(2, [8, 8], 32, 40, torch.float32)
    slots = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="does not match lora_a"):
        lora_shrink(torch.randn(4, 16, device=DEVICE), lora_a, slots)
    with pytest.raises(ValueError, match="unit column stride"):
        lora_expand(torch.randn(4, 8, device=DEVICE), lora_b, slots, torch.zeros(40, 4, device=DEVICE).T, scaling)
    with pytest.raises(ValueError, match="3 token slots for 4 tokens"):
        lora_shrink(torch.randn(4, 32, device=DEVICE), lora_a, slots[:3])
