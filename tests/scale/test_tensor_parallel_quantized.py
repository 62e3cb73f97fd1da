"""Quantized checkpoints over two gloo ranks give what one process gives: every quantized tensor split along
the dimension its plain layer's weight splits (scales per group of inputs with them, scales per output row
whole on row-parallel layers), and gpt-oss's MXFP4 experts, kept or dequantized at load."""

from __future__ import annotations

import pytest

from bulkinfer import LLM, SamplingParams
from bulkinfer.layers.parallel import TensorParallel
from bulkinfer.models.loader import keeps_mxfp4, read_config
from gpt_oss_checkpoint import make_gpt_oss_checkpoint, write_mxfp4_checkpoint
from quantized_checkpoints import (
    fp8_block_config, fp8_block_quantizer, gptq_config, gptq_quantizer, write_by_layout,
)

pytestmark = pytest.mark.slow  # spawns rank processes with a process group each

PROMPTS = [[5, 6, 7], list(range(10, 40)), list(range(50, 67))]
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3)
ENGINE = dict(dtype="float32", max_model_len=128, max_num_batched_tokens=24, block_size=8)


def _run(path, tensor_parallel_size: int):
    with LLM(str(path), tensor_parallel_size=tensor_parallel_size, **ENGINE) as llm:
        return [o.outputs[0] for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("arch, config, quantizer", [
    ("qwen2", gptq_config(4, 16, False, False), gptq_quantizer(4, 16, False, False)),  # groups split with inputs
    ("llama", gptq_config(8, -1, False, True), gptq_quantizer(8, -1, False, True)),
    ("qwen3_moe", fp8_block_config((16, 16)), fp8_block_quantizer((16, 16))),  # block scales, experts
], ids=["gptq-int4-g16-asym", "gptq-int8-per-channel", "fp8-block-experts"])
def test_two_ranks_give_the_results_of_one(checkpoint_factory, tmp_path, arch, config, quantizer):
    path, _ = write_by_layout(checkpoint_factory(arch), tmp_path / "quantized", config, quantizer)
    _assert_two_ranks_give_the_results_of_one(path)


@pytest.mark.parametrize("intermediate_size, kept", [(64, True), (32, False)], ids=["kept", "dequantized"])
def test_gpt_oss_mxfp4_experts_on_two_ranks(tmp_path, intermediate_size, kept):
    """32 expert columns a rank are a whole MXFP4 group each, and stay MXFP4; 16 a rank would split a group's
    scale, and are dequantized at load."""
    mxfp4, _ = write_mxfp4_checkpoint(make_gpt_oss_checkpoint(tmp_path / "plain", intermediate_size=intermediate_size),
                                      tmp_path)
    assert keeps_mxfp4(read_config(mxfp4)[0], TensorParallel(0, 2)) == kept
    _assert_two_ranks_give_the_results_of_one(mxfp4)


def _assert_two_ranks_give_the_results_of_one(path) -> None:
    one, two = _run(path, 1), _run(path, 2)
    assert [o.token_ids for o in two] == [o.token_ids for o in one]
    for a, b in zip(one, two):
        for record_a, record_b in zip(a.logprobs, b.logprobs):
            assert record_a.keys() == record_b.keys()
            for token in record_a:
                assert record_b[token].logprob == pytest.approx(record_a[token].logprob, abs=1e-4)
