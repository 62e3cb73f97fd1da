"""An FP8 KV cache in every attention path.

The references are checked against attention written out token by token on the dequantized keys
and values, and the e4m3 conversion against torch's own float8_e4m3fn; the Triton kernels, the CPU
path's compiled decode and the batch-invariant path are then checked against the references on the
same FP8 caches, with scales that are not powers of two.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close, make_batch  # noqa: E402

from bulkinfer.kernels._triton import jit, tl  # noqa: E402
from bulkinfer.kernels.fp8 import FP8_E4M3, FP16_SHIFT, e4m3_to_fp16, quantize  # noqa: E402
from bulkinfer.kernels.paged_attention import paged_attention_ref, paged_attention_triton  # noqa: E402
from bulkinfer.kernels.paged_attention_cpu import attend_compiled  # noqa: E402
from bulkinfer.kernels.paged_attention_invariant import paged_attention_invariant  # noqa: E402
from bulkinfer.kernels.store_kv import store_kv_ref, store_kv_triton  # noqa: E402

K_SCALE, V_SCALE = 0.37, 0.011  # values reach 1/V_SCALE ~ 90 of e4m3's 448


def fp8_batch(rows, num_heads=4, num_kv_heads=2, head_dim=64, dtype=torch.float32, seed=0, **kwargs) -> dict:
    batch = make_batch(rows, num_heads, num_kv_heads, head_dim, dtype, seed=seed, **kwargs)
    batch["k_cache"] = quantize(batch["k_cache"], K_SCALE)
    batch["v_cache"] = quantize(batch["v_cache"], V_SCALE)
    return dict(batch, k_scale=K_SCALE, v_scale=V_SCALE)


def attention_per_token(batch: dict) -> torch.Tensor:
    """Each new token's softmax over its visible keys, one token and one head at a time, in fp64."""
    keys = batch["k_cache"].double() * K_SCALE
    values = batch["v_cache"].double() * V_SCALE
    starts, lens = batch["query_start_loc"].tolist(), batch["seq_lens"].tolist()
    block_size, kv_heads = keys.shape[1], keys.shape[2]
    out = torch.zeros(batch["query"].shape, dtype=torch.float64)
    for seq, (start, end) in enumerate(zip(starts, starts[1:])):
        table = batch["block_tables"][seq].long()
        slots = [(int(table[p // block_size]), p % block_size) for p in range(lens[seq])]
        for token in range(start, end):
            position = lens[seq] - (end - token)
            for head in range(batch["query"].shape[1]):
                kv = head // (batch["query"].shape[1] // kv_heads)
                k = torch.stack([keys[b, o, kv] for b, o in slots[:position + 1]])
                v = torch.stack([values[b, o, kv] for b, o in slots[:position + 1]])
                weights = torch.softmax(k @ batch["query"][token, head].double() * batch["scale"], 0)
                out[token, head] = weights @ v
    return out


MIXED = [(1, 17), (9, 9), (1, 1), (4, 33), (1, 40)]


def test_reference_is_attention_on_the_dequantized_cache():
    batch = fp8_batch(MIXED, seed=1)
    expected = attention_per_token({k: v.cpu() if torch.is_tensor(v) else v for k, v in batch.items()})
    torch.testing.assert_close(paged_attention_ref(**batch).double().cpu(), expected, atol=1e-5, rtol=1e-5)


def test_reference_store_rounds_as_torch_does():
    # Halfway points between e4m3 values, values past 448 and below the subnormals, negative zero.
    finite = torch.arange(256, dtype=torch.uint8).view(FP8_E4M3).float()
    finite = finite[~finite.isnan()].sort().values
    values = torch.cat([finite, (finite[1:] + finite[:-1]) / 2, torch.tensor([1e3, -1e3, 1e-6, -0.0]),
                        torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 30])
    rows = values[: values.numel() // 64 * 64].view(-1, 1, 64)
    k_cache = torch.zeros(rows.shape[0], 1, 1, 64, dtype=FP8_E4M3)
    v_cache = torch.zeros_like(k_cache)
    slots = torch.arange(rows.shape[0])
    store_kv_ref(rows, rows, k_cache, v_cache, slots, k_scale=0.5, v_scale=3.0)
    expected_k = (rows / 0.5).clamp(-448, 448).to(FP8_E4M3)
    expected_v = (rows / 3.0).clamp(-448, 448).to(FP8_E4M3)
    assert torch.equal(k_cache.view(torch.uint8).flatten(), expected_k.view(torch.uint8).flatten())
    assert torch.equal(v_cache.view(torch.uint8).flatten(), expected_v.view(torch.uint8).flatten())


@jit
def _read_bytes(bits_ptr, out_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(out_ptr + offsets, e4m3_to_fp16(tl.load(bits_ptr + offsets)).to(tl.float32))


def test_kernels_read_every_e4m3_byte_as_torch_does():
    bits = torch.arange(256, dtype=torch.uint8, device=DEVICE)
    out = torch.empty(256, device=DEVICE)
    _read_bytes[(1,)](bits, out, 256)
    expected = bits.view(FP8_E4M3).float()
    finite = ~expected.isnan()  # 0x7f and 0xff: never stored, as stores saturate at 448
    assert torch.equal(out[finite] * FP16_SHIFT, expected[finite])
    assert torch.equal(out[finite].signbit(), expected[finite].signbit())


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_store_kv_kernel_writes_the_references_bytes(dtype):
    gen = torch.Generator().manual_seed(3)
    key = (torch.randn(40, 2, 64, generator=gen) * torch.logspace(-4, 3, 40)[:, None, None]).to(DEVICE, dtype)
    value = torch.randn(40, 2, 64, generator=gen).to(DEVICE, dtype)
    slots = torch.randperm(48, generator=gen)[:40].to(DEVICE)
    slots[5] = -1  # padding
    caches = [torch.zeros(6, 8, 2, 64, dtype=FP8_E4M3, device=DEVICE) for _ in range(4)]
    store_kv_ref(key, value, caches[0], caches[1], slots, k_scale=K_SCALE, v_scale=V_SCALE)
    store_kv_triton(key, value, caches[2], caches[3], slots, k_scale=K_SCALE, v_scale=V_SCALE)
    assert torch.equal(caches[2].view(torch.uint8), caches[0].view(torch.uint8))
    assert torch.equal(caches[3].view(torch.uint8), caches[1].view(torch.uint8))


@pytest.mark.parametrize("batch_invariant", [False, True])
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_triton_attention_reads_fp8(dtype, num_splits, batch_invariant):
    batch = fp8_batch(MIXED + [(1, 70), (16, 50)], 8, 2, 64, dtype, seed=2)
    expected = paged_attention_ref(**batch)
    actual = paged_attention_triton(**batch, num_splits=num_splits, batch_invariant=batch_invariant)
    assert_close(actual, expected)


def test_triton_attention_reads_fp8_with_window_and_cap():
    batch = fp8_batch([(1, 50), (12, 40), (1, 9)], 4, 1, 80, seed=4)
    variant = {"sliding_window": 13, "softcap": 20.0}
    assert_close(paged_attention_triton(**batch, **variant, num_splits=2), paged_attention_ref(**batch, **variant))


def test_cpu_compiled_decode_reads_fp8():
    batch = fp8_batch([(1, n) for n in (1, 17, 33, 50)], seed=5)
    q = batch["query"].cpu()
    caches = {k: batch[k].cpu() for k in ("k_cache", "v_cache", "block_tables", "seq_lens")}
    expected = paged_attention_ref(**{**batch, **caches, "query": q})
    actual = attend_compiled(q, caches["k_cache"], caches["v_cache"], caches["block_tables"], caches["seq_lens"],
                             50, batch["scale"], k_scale=K_SCALE, v_scale=V_SCALE)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_batch_invariant_path_reads_fp8():
    batch = {k: v.cpu() if torch.is_tensor(v) else v for k, v in fp8_batch(MIXED, seed=6).items()}
    torch.testing.assert_close(paged_attention_invariant(**batch), paged_attention_ref(**batch), atol=1e-5, rtol=1e-5)

