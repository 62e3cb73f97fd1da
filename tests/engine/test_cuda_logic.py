"""The CUDA path's host-side logic, checked on the CPU: device placement, dtype fallback, KV-pool
sizing, sliced logits, batched penalties and the pinned staging copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen3NextConfig

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine import step_logits
from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.kv_budget import GIB, activation_reserve, kv_blocks_that_fit, kv_bytes_per_token
from bulkinfer.engine.resolve import ResolvedConfig, resolve_dtype
from bulkinfer.engine.sampler import apply_penalties
from bulkinfer.engine.state_pool import StatePool
from bulkinfer.engine.step_plan import HostStaging
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.layers.ops import TORCH_OPS
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.llama import CausalLM
from bulkinfer.models.loader import read_config

CUDA = torch.device("cuda")  # never touched: only its type is read


def test_every_buffer_follows_the_device_the_model_is_built_on(tiny_llama):
    config, _ = read_config(tiny_llama)
    with torch.device("meta"):
        model = CausalLM(config, TORCH_OPS, max_position=64)
    placed = {name: t.device.type for name, t in [*model.named_parameters(), *model.named_buffers()]}
    assert "rope_cache" in placed and set(placed.values()) == {"meta"}, placed


def test_loaded_parameters_need_no_grad(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=64)
    assert not any(p.requires_grad for p in llm.runner.model.parameters())


def test_bfloat16_falls_back_to_float16_without_support(tiny_llama, monkeypatch):
    config = ModelConfig.from_hf({**read_config(tiny_llama)[1], "torch_dtype": "float32"})
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", config, CUDA).dtype == torch.float16
    assert resolve_dtype("bfloat16", config, CUDA).dtype == torch.float16
    assert resolve_dtype("float32", config, CUDA).dtype == torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", config, CUDA).dtype == torch.bfloat16


def qwen_like() -> ModelConfig:
    """A 1.5B Qwen2 shape: 152k vocabulary, 28 layers, 2 KV heads of 128."""
    return ModelConfig.from_hf({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936, "hidden_size": 1536,
                                "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                                "num_key_value_heads": 2, "max_position_embeddings": 32768,
                                "torch_dtype": "bfloat16"})


def gpu_config(utilization: float, max_num_seqs: int = 256) -> ResolvedConfig:
    options = EngineConfig(gpu_memory_utilization=utilization, max_num_seqs=max_num_seqs)
    return ResolvedConfig(options, CUDA, torch.bfloat16, max_model_len=4096, max_num_batched_tokens=8192)


@pytest.mark.parametrize("utilization", [0.5, 0.9])
def test_kv_pool_is_sized_from_utilization(monkeypatch, utilization):
    model, total, used = qwen_like(), 80 * GIB, 4 * GIB  # the weights and others' use
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (total - used, total))
    config = gpu_config(utilization)
    blocks = kv_blocks_that_fit(config, model, [KVShape(2, 128)] * 28, block_size=16, device=CUDA)
    block_bytes = 2 * 28 * 16 * 2 * 128 * 2
    expected = (utilization * total - used - activation_reserve(model, config, 1)) // block_bytes
    assert blocks == min(int(expected), 256 * 256 + 1)
    # The reserve covers the widest step and one slice of fp32 logits, not all 8,192 rows' (10 GiB).
    assert 2 * GIB < activation_reserve(model, config, 1) < 4 * GIB


def qwen3_next_like() -> tuple[ModelConfig, CausalLM]:
    """Qwen3-Next-80B's delta-net layers (32 value heads over 16 key heads, heads of 128), three layers of them and
    one of attention, its MLP shrunk: the model built on the meta device in bf16."""
    hf = Qwen3NextConfig(hidden_size=2048, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=2,
                         head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                         linear_value_head_dim=128, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=64,
                         shared_expert_intermediate_size=64, vocab_size=1024,
                         layer_types=["linear_attention"] * 3 + ["full_attention"]).to_dict()
    config = ModelConfig.from_hf({**hf, "architectures": ["Qwen3NextForCausalLM"], "torch_dtype": "bfloat16"})
    with torch.device("meta"):
        return config, CausalLM(config, ops=None, max_position=16).to(torch.bfloat16)


def test_a_hybrids_prefill_scratch_comes_off_the_kv_pool(monkeypatch):
    """The chunked delta-rule prefill of an 8,192-token step of 256 sequences (bf16: chunks of 32, so at most 512)
    allocates w and u [8,192, 32, 128] and 512 chunk states [32, 128, 128], in fp32: 1.25 GiB that the pool leaves."""
    config, model = qwen3_next_like()
    scratch = StatePool.prefill_scratch_bytes(model.recurrent_layers(), 8192, 256)
    assert scratch == 4 * 32 * (8192 * (128 + 128) + 512 * 128 * 128) == 1_342_177_280
    total = 80 * GIB  # what is free leaves half a GiB for the pool once the share, activations and scratch are out
    free = 8 * GIB + activation_reserve(config, gpu_config(0.9), 1) + scratch + GIB // 2
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    sizing = gpu_config(0.9), config, model.kv_shapes(), 16, CUDA
    with_scratch, without = kv_blocks_that_fit(*sizing, scratch_bytes=scratch), kv_blocks_that_fit(*sizing)
    block_bytes = 16 * kv_bytes_per_token(model.kv_shapes(), torch.bfloat16)
    assert 0 < with_scratch < without and abs((without - with_scratch) - scratch / block_bytes) <= 1


def test_no_room_gives_no_blocks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (3 * GIB, 24 * GIB))
    assert kv_blocks_that_fit(gpu_config(0.9), qwen_like(), [KVShape(2, 128)] * 28, 16, CUDA) == 0


def test_sliced_logits_give_the_same_prompt_logprobs(tiny_llama, monkeypatch):
    prompts = [list(range(5, 45)), list(range(100, 117))]
    params = SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=2, logprobs=3)
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=128, enable_prefix_caching=False)
    whole = llm.generate(prompts, params, use_tqdm=False)
    monkeypatch.setattr(step_logits, "LOGIT_SLICE_ROWS", 7)  # sampled and prompt rows share slices
    sliced = llm.generate(prompts, params, use_tqdm=False)
    for a, b in zip(whole, sliced):
        # The LM head's matmul over fewer rows may round differently in the last bit.
        assert_records_close(a.prompt_logprobs[1:], b.prompt_logprobs[1:])
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert_records_close(a.outputs[0].logprobs, b.outputs[0].logprobs)


def assert_records_close(expected, actual):
    assert len(expected) == len(actual) and all(expected)
    for want, got in zip(expected, actual):
        assert list(want) == list(got) and [w.rank for w in want.values()] == [g.rank for g in got.values()]
        assert [w.logprob for w in want.values()] == pytest.approx([g.logprob for g in got.values()], abs=1e-5)


class _Seq:
    def __init__(self, prompt, output, **penalties):
        self.token_ids, self.output_token_ids = prompt + output, output
        self.params = SamplingParams(**penalties)


def per_row_penalties(logits, seqs):
    """The penalties one row at a time, as written before they were batched."""
    logits = logits.clone()
    for row, seq in enumerate(seqs):
        p = seq.params
        counts = torch.bincount(torch.tensor(seq.output_token_ids, dtype=torch.long), minlength=logits.shape[1])
        counts = counts[:logits.shape[1]].float()
        if p.repetition_penalty != 1:
            seen = torch.tensor(seq.token_ids).unique()
            values = logits[row, seen]
            logits[row, seen] = torch.where(values > 0, values / p.repetition_penalty, values * p.repetition_penalty)
        logits[row] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
    return logits


def test_batched_penalties_equal_per_row_ones():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    seqs = [_Seq([1, 2, 3], [3, 3, 9], repetition_penalty=1.3, frequency_penalty=0.5),
            _Seq([4], [], presence_penalty=0.7),
            _Seq([5, 6], [7, 7, 7, 8], presence_penalty=0.2, frequency_penalty=0.1),
            _Seq([10, 11], [12], repetition_penalty=0.8)]
    assert torch.equal(apply_penalties(logits, seqs), per_row_penalties(logits, seqs))


def test_staging_carries_a_step_in_one_buffer():
    staging = HostStaging(torch.device("cpu"))
    for size in (3, 40, 5, 9000):  # grows, then reuses its buffers
        arrays = [np.arange(size, dtype=np.int64), np.arange(size + 1, dtype=np.int32),
                  np.zeros(0, dtype=np.int64),  # a step with no logit rows
                  np.arange(2 * size, dtype=np.int32).reshape(2, size)]
        tensors = staging.to_device(arrays)
        for array, tensor in zip(arrays, tensors):
            assert tensor.dtype == torch.from_numpy(array).dtype and torch.equal(tensor, torch.from_numpy(array))
        assert all(t.untyped_storage().data_ptr() == staging.on_device.untyped_storage().data_ptr() for t in tensors)
