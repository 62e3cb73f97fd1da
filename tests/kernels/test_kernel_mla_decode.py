"""Absorbed multi-head latent attention decode: the reference against expanding the latent into each head's
keys and values and attending as usual, and the Triton kernel (split and unsplit) against the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from kernel_testing import DEVICE, DTYPE_PARAMS, assert_close

from bulkinfer.kernels.mla_decode import mla_decode_ref, mla_decode_triton

LENGTHS = [1, 17, 40, 5, 64]  # within a block, across blocks, across the interpreter's 16-key slices


def latent_batch(lengths: list[int], heads: int, latent_dim: int, rope_dim: int, dtype: torch.dtype,
                 block_size: int = 8, seed: int = 0) -> dict:
    """A decode query per sequence and a latent cache whose blocks are shuffled over the pool."""
    gen = torch.Generator().manual_seed(seed)
    blocks = [-(-n // block_size) for n in lengths]
    pool = 2 * sum(blocks) + 1
    order = torch.randperm(pool, generator=gen)
    tables = torch.zeros(len(lengths), max(blocks) + 1, dtype=torch.int32)
    used = 0
    for i, count in enumerate(blocks):
        tables[i, :count] = order[used:used + count]
        used += count
    width = latent_dim + rope_dim
    batch = dict(query=torch.randn(len(lengths), heads, width, generator=gen),
                 latent_cache=torch.randn(pool, block_size, 1, width, generator=gen),
                 seq_lens=torch.tensor(lengths, dtype=torch.int32), block_tables=tables)
    batch = {k: v.to(DEVICE, dtype if v.is_floating_point() else None) for k, v in batch.items()}
    return batch | {"scale": width ** -0.5, "latent_dim": latent_dim}


def test_absorbed_decode_equals_attention_over_expanded_keys_and_values():
    """DeepSeek's layer written out: keys [k_nope = c W_uk | k_rope], values c W_uv, per head; absorbed, the
    query q_nope W_uk^T meets c, and the latent output times W_uv is the head's output."""
    heads, latent_dim, rope_dim, nope_dim, v_dim = 4, 32, 8, 16, 12
    gen = torch.Generator().manual_seed(1)
    w_uk = torch.randn(heads, nope_dim, latent_dim, generator=gen) / latent_dim ** 0.5
    w_uv = torch.randn(heads, v_dim, latent_dim, generator=gen) / latent_dim ** 0.5
    q_nope, q_rope = torch.randn(len(LENGTHS), heads, nope_dim, generator=gen), torch.randn(
        len(LENGTHS), heads, rope_dim, generator=gen)
    batch = latent_batch(LENGTHS, heads, latent_dim, rope_dim, torch.float32)
    scale = (nope_dim + rope_dim) ** -0.5
    absorbed = torch.cat([torch.einsum("shn,hnl->shl", q_nope, w_uk), q_rope], dim=-1)
    out_latent = mla_decode_ref(absorbed, batch["latent_cache"].cpu(), batch["seq_lens"].cpu(),
                                batch["block_tables"].cpu(), scale, latent_dim)
    got = torch.einsum("shl,hvl->shv", out_latent, w_uv)
    for i, length in enumerate(LENGTHS):
        slots = [int(batch["block_tables"][i, p // 8]) * 8 + p % 8 for p in range(length)]
        rows = batch["latent_cache"].cpu().flatten(0, 1)[slots, 0]  # [length, latent + rope]
        c, k_rope = rows[:, :latent_dim], rows[:, latent_dim:]
        keys = torch.cat([torch.einsum("tl,hnl->htn", c, w_uk), k_rope.expand(heads, -1, -1)], dim=-1)
        values = torch.einsum("tl,hvl->htv", c, w_uv)
        query = torch.cat([q_nope[i], q_rope[i]], dim=-1)[:, None]  # [heads, 1, nope + rope]
        expected = F.scaled_dot_product_attention(query, keys, values, scale=scale)[:, 0]
        torch.testing.assert_close(got[i], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("heads, latent_dim, rope_dim", [(4, 32, 8), (20, 64, 16)])  # 20: a partial head block
def test_triton_kernel_matches_the_reference(dtype, num_splits, heads, latent_dim, rope_dim):
    batch = latent_batch(LENGTHS, heads, latent_dim, rope_dim, dtype)
    assert_close(mla_decode_triton(**batch, num_splits=num_splits), mla_decode_ref(**batch))
