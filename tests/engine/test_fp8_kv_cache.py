"""kv_cache_dtype="fp8_e4m3" end to end on the CPU: four times the blocks of fp32 in the same memory,
logits close to the full-precision cache, the same greedy tokens under chunked prefill, prefix
caching and preemption, and the checkpoint's k_scale/v_scale used for what is stored."""

from __future__ import annotations

import shutil
from dataclasses import replace

import pytest
import torch
from compressed_tensors.quantization import KVCacheScaleType
from safetensors.torch import load_file, save_file

from bulkinfer import LLM, SamplingParams
from bulkinfer.kernels.fp8 import quantize
from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.kv_budget import kv_blocks_that_fit
from bulkinfer.layers.kv_shape import KVShape
from bulkinfer.engine.resolve import ResolvedConfig
from probes import last_logits

FP8 = {"kv_cache_dtype": "fp8_e4m3"}
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
# Logits of an fp8 cache against an fp32 one on the tiny Llama, whose logits have a std of 2.4 and
# whose attention is peaked (keys and queries up to 9): e4m3 keeps 3 mantissa bits, each key and
# value within 1/16 of itself, and over 4 prompts of 40 tokens the largest difference measured was
# 1.48 and the mean 0.39 (0.12 to 0.39 per prompt); the argmax agreed on each.
MAX_LOGIT_ERROR, MEAN_LOGIT_ERROR = 2.0, 0.5


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(5, 600, (length,), generator=generator).tolist() for _ in range(count)]


def tokens(llm: LLM, batch: list[list[int]]) -> list[list[int]]:
    return [output.outputs[0].token_ids for output in llm.generate(batch, GREEDY, use_tqdm=False)]


@pytest.mark.parametrize("dtype,ratio", [(torch.float32, 4), (torch.float16, 2)])
def test_fp8_blocks_fit_one_byte_per_element(dtype, ratio):
    shapes = [KVShape(2, 64)] * 4  # 512 elements per token and layer: the 1 MiB budget holds whole blocks
    blocks = {}
    for kv_cache_dtype in ("auto", "fp8_e4m3"):
        options = EngineConfig(kv_cache_dtype=kv_cache_dtype, kv_cache_memory_gb=2 ** -10, max_num_seqs=10_000)
        config = ResolvedConfig(options, torch.device("cpu"), dtype, max_model_len=4096, max_num_batched_tokens=64)
        blocks[kv_cache_dtype] = kv_blocks_that_fit(config, None, shapes, 16, torch.device("cpu"))
    assert blocks["fp8_e4m3"] == ratio * blocks["auto"]


def test_engine_allocates_an_fp8_pool_of_four_times_the_blocks(tiny_llama):
    full = LLM(str(tiny_llama), dtype="float32", max_model_len=256, kv_cache_memory_gb=0.001)
    fp8 = LLM(str(tiny_llama), dtype="float32", max_model_len=256, kv_cache_memory_gb=0.001, **FP8)
    assert fp8.runner.kv_caches[0].dtype == torch.float8_e4m3fn
    assert fp8.runner.num_blocks == 4 * full.runner.num_blocks


def test_fp8_logits_are_close_to_the_full_cache(tiny_llama):
    full = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8)
    fp8 = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8, **FP8)
    for ids in prompts(4, 40, seed=0):
        expected, actual = last_logits(full, ids), last_logits(fp8, ids)
        error = (actual - expected).abs()
        assert error.max() < MAX_LOGIT_ERROR and error.mean() < MEAN_LOGIT_ERROR, (error.max(), error.mean())
        assert actual.argmax() == expected.argmax()


def test_fp8_logits_are_those_of_a_full_cache_holding_e4m3_values(tiny_llama):
    # The whole difference is the rounding of what is stored: an fp32 cache given the same rounded
    # keys and values, and reading a prompt's keys back from it as an fp8 cache does (rather than
    # attending to the step's unrounded ones), gives the same logits.
    fp8 = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8, **FP8)
    rounded = LLM(str(tiny_llama), dtype="float32", max_model_len=256, block_size=8)
    store, attend = rounded.runner.ops.store_kv, rounded.runner.ops.paged_attention

    def store_rounded(key, value, k_cache, v_cache, slots, **scales):
        store(quantize(key, 1.0).float(), quantize(value, 1.0).float(), k_cache, v_cache, slots)

    def attend_to_the_stored(*args, key=None, value=None, **kwargs):
        return attend(*args, **kwargs)

    for layer in rounded.runner.model.attention_layers():
        layer.ops = replace(layer.ops, store_kv=store_rounded, paged_attention=attend_to_the_stored)
    for ids in prompts(4, 40, seed=0):
        torch.testing.assert_close(last_logits(fp8, ids), last_logits(rounded, ids), atol=1e-4, rtol=1e-4)


def busy_fp8_engine(path: str) -> LLM:
    # 5-token steps chunk every prompt; 12 blocks of 2 tokens hold one finished request (<= 21 tokens).
    return LLM(path, dtype="float32", max_model_len=256, block_size=2, num_kv_blocks=12, max_num_batched_tokens=5,
               **FP8)


def test_fp8_greedy_tokens_do_not_depend_on_chunks_prefix_hits_or_preemption(tiny_llama):
    shared = prompts(1, 6, seed=1)[0]
    batch = [shared + tail for tail in prompts(4, 3, seed=2)]
    plain = tokens(LLM(str(tiny_llama), dtype="float32", max_model_len=256, enable_prefix_caching=False, **FP8), batch)
    busy = busy_fp8_engine(str(tiny_llama))
    assert tokens(busy, batch) == plain
    assert busy.stats.preemptions > 0 and busy.stats.prefix_cache_hit_tokens > 0


def test_fp8_greedy_tokens_equal_the_full_cache_on_short_prompts(checkpoint_factory):
    # Smaller weights than the default tiny model's: attention less peaked, so fp8's logit error
    # stays below these prompts' greedy margins: each of their choices survives it (the narrowest
    # margin among them is 0.06 logits).
    path = str(checkpoint_factory("llama", initializer_range=0.15))
    batch = [prompts(1, 6, seed=seed)[0] for seed in range(4)]
    expected = tokens(LLM(path, dtype="float32", max_model_len=256, enable_prefix_caching=False), batch)
    busy = busy_fp8_engine(path)
    assert tokens(busy, batch) == expected
    assert busy.stats.preemptions > 0


def with_kv_scales(source, target, scales: dict[str, float]):
    """A copy of a checkpoint with KV-cache scale tensors added, as compressed-tensors writes them."""
    shutil.copytree(source, target)
    weights = load_file(target / "model.safetensors")
    weights.update({name: torch.tensor([value], dtype=torch.float32) for name, value in scales.items()})
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    return target


def test_checkpoint_scales_set_what_the_cache_stores(tiny_llama, tmp_path):
    # compressed-tensors' names for layer 0 (its attention module's own parameters); the older single
    # kv_scale, for keys and values alike, for layer 1.
    key, value = (f"model.layers.0.self_attn.{kind.value}" for kind in (KVCacheScaleType.KEY, KVCacheScaleType.VALUE))
    scales = {key: 4.0, value: 0.25, "model.layers.1.self_attn.kv_scale": 2.0}
    path = with_kv_scales(tiny_llama, tmp_path / "scaled", scales)
    prompt = prompts(1, 30, seed=3)
    full = LLM(str(path), dtype="float32", max_model_len=64)
    fp8 = LLM(str(path), dtype="float32", max_model_len=64, **FP8)
    layers = fp8.runner.model.attention_layers()
    assert [(layer.k_scale, layer.v_scale) for layer in layers] == [(4.0, 0.25), (2.0, 2.0)]
    for llm in (full, fp8):  # the prompt's keys and values only: the sampled token is never stored
        llm.generate(prompt, SamplingParams(max_tokens=1), use_tqdm=False)
    # Layer 0's keys and values come from the embeddings alone, so both runs store the same ones:
    # e4m3 of value / scale (relative error 1/16, subnormal steps of 2^-9 before scaling).
    stored, exact = fp8.runner.kv_caches[0], full.runner.kv_caches[0]
    for scale, fp8_rows, full_rows in ((4.0, stored[0], exact[0]), (0.25, stored[1], exact[1])):
        torch.testing.assert_close(fp8_rows.float() * scale, full_rows, rtol=1 / 16, atol=scale * 2 ** -9)
        assert not torch.allclose(fp8_rows.float(), full_rows, rtol=1 / 16, atol=2 ** -9)


def test_modelopt_scale_names_are_read_and_a_bad_scale_is_refused(tiny_llama, tmp_path):
    path = with_kv_scales(tiny_llama, tmp_path / "modelopt", {"model.layers.1.self_attn.k_proj.k_scale": 0.5,
                                                             "model.layers.1.self_attn.v_proj.v_scale": 3.0})
    layer = LLM(str(path), dtype="float32", max_model_len=64, **FP8).runner.model.attention_layers()[1]
    assert (layer.k_scale, layer.v_scale) == (0.5, 3.0)
    path = with_kv_scales(tiny_llama, tmp_path / "zero", {"model.layers.0.self_attn.k_scale": 0.0})
    with pytest.raises(ValueError, match="k_scale must be one positive scale"):
        LLM(str(path), dtype="float32", max_model_len=64, **FP8)
