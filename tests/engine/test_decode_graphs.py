"""The padded static buffers that CUDA graphs replay, run eagerly on the CPU."""

from __future__ import annotations

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


def test_padded_decode_step_gives_the_unpadded_hidden_states(tiny_llama):
    llm = LLM(str(tiny_llama), max_model_len=128, block_size=8)
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
