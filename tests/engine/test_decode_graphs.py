"""The padded static buffers that CUDA graphs replay, run eagerly on the CPU."""

from __future__ import annotations

import pytest
import torch

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.decode_graphs import DecodeGraphs, batch_buckets
from bulkinfer.engine.scheduler import ScheduledBatch
from bulkinfer.engine.step_plan import plan_step


def test_buckets_cover_every_batch_size():
    assert batch_buckets(40) == [1, 2, 4, 8, 16, 32, 40]
    assert batch_buckets(1) == [1]
    for max_batch in (1, 3, 16, 17, 256):
        buckets = batch_buckets(max_batch)
        assert buckets == sorted(set(buckets)) and buckets[-1] == max_batch


# DeepSeek-V3's latent attention: the padding rows' decode reads block 0 through the absorbed kernel.
@pytest.mark.parametrize(("arch", "overrides"), [("llama", {}), ("deepseek_v3", {"first_k_dense_replace": 2})])
def test_padded_decode_step_gives_the_unpadded_hidden_states(checkpoint_factory, arch, overrides):
    llm = LLM(str(checkpoint_factory(arch, **overrides)), dtype="float32", max_model_len=128, block_size=8)
    for index, prompt in enumerate(([5, 6, 7], list(range(10, 40)), list(range(50, 67)))):
        llm.add_request(index, prompt, SamplingParams(temperature=0, max_tokens=8))
    while any(seq.num_output_tokens == 0 for seq in llm.scheduler.running) or llm.scheduler.waiting:
        llm.step()  # prefill all three, so the next step is decode only
    running = list(llm.scheduler.running)
    batch = ScheduledBatch(running, [1] * len(running))
    for seq in running:
        llm.block_manager.allocate_slots(seq, 1)
    plan, _ = plan_step(batch, llm.runner.block_size)
    inputs = plan.to(torch.device("cpu"))
    graphs = DecodeGraphs(llm.runner.model, max_batch=8, max_blocks_per_seq=16, max_seq_len=128,
                          device=torch.device("cpu"), capture=False)
    assert graphs.fits(inputs.attn)
    with torch.inference_mode():
        expected = llm.runner.model(inputs.input_ids, inputs.positions, inputs.attn)
        padded = graphs.run(inputs.input_ids, inputs.positions, inputs.attn)  # 3 rows padded to 4
    torch.testing.assert_close(padded, expected, atol=1e-5, rtol=0)


def decode_ready(tiny_llama, prompts=([5, 6, 7], list(range(10, 40)), list(range(50, 67)))):
    """An engine whose running sequences have all prefilled, and the graphs' buffers beside it."""
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=128, block_size=8)
    for index, prompt in enumerate(prompts):
        llm.add_request(index, prompt, SamplingParams(temperature=0, max_tokens=8))
    while any(seq.num_output_tokens == 0 for seq in llm.scheduler.running) or llm.scheduler.waiting:
        llm.step()
    graphs = DecodeGraphs(llm.runner.model, max_batch=8, max_blocks_per_seq=16, max_seq_len=128,
                          device=torch.device("cpu"), capture=False)
    return llm, graphs


def decode_inputs(llm, seqs):
    batch = ScheduledBatch(seqs, [1] * len(seqs))
    for seq in seqs:
        llm.block_manager.allocate_slots(seq, 1)
    plan, _ = plan_step(batch, llm.runner.block_size)
    return plan.to(torch.device("cpu"))


def test_padding_rows_are_reset_between_replays(tiny_llama):
    llm, graphs = decode_ready(tiny_llama, [[5 + i, 6, 7] for i in range(5)])
    running = list(llm.scheduler.running)
    with torch.inference_mode():
        wide = decode_inputs(llm, running)  # 5 rows in the bucket of 8
        graphs.run(wide.input_ids, wide.positions, wide.attn)
        narrow = decode_inputs(llm, running[:3])  # 3 rows in the bucket of 4: rows 3 and 4 go stale
        graphs.run(narrow.input_ids, narrow.positions, narrow.attn)
    assert graphs.slot_mapping[:3].tolist() == narrow.attn.slot_mapping.tolist()
    assert graphs.slot_mapping[3:4].tolist() == [-1]  # padding stores nothing
    assert graphs.seq_lens[3:4].tolist() == [1] and not graphs.block_tables[3:4].any()
    width = narrow.attn.block_tables.shape[1]
    assert torch.equal(graphs.block_tables[:3, :width], narrow.attn.block_tables)
    assert not graphs.block_tables[:3, width:].any()  # a wider earlier table leaves no stale columns


def test_failed_capture_leaves_no_graph_and_no_cache_write(tiny_llama):
    # On the CPU, torch.cuda.graph fails right after the first warm-up: a real capture failure.
    llm, _ = decode_ready(tiny_llama)
    cache_before = [cache.clone() for cache in llm.runner.kv_caches]
    graphs = DecodeGraphs(llm.runner.model, max_batch=8, max_blocks_per_seq=16, max_seq_len=128,
                          device=torch.device("cpu"), capture=True)
    assert not graphs.captured and not graphs.graphs and not graphs.hidden
    assert all(map(torch.equal, llm.runner.kv_caches, cache_before))  # the warm-up wrote to slot -1: nowhere


@pytest.mark.parametrize("error", ["triton", "value"])
def test_capture_catches_what_triton_raises(tiny_llama, error):
    from triton.runtime.errors import OutOfResources

    def fails(*args):
        if error == "triton":
            raise OutOfResources(required=300000, limit=232448, name="shared memory")
        raise ValueError("Pointer argument (at 3) cannot be accessed from Triton (cpu tensor?)")

    graphs = DecodeGraphs(fails, max_batch=4, max_blocks_per_seq=4, max_seq_len=64,
                          device=torch.device("cpu"), capture=True)
    assert not graphs.captured and not graphs.graphs
