"""Every Triton kernel compiled for real GPUs on a machine without one.

``triton.compile`` builds PTX and a cubin for a named target through the ptxas bundled with
Triton, so the kernels' compile errors, shared memory and register spills can be found in CI.
For each GPU target and each shape bulkinfer supports, the launchers decide their launches from
CPU tensors (their configuration is a pure function of shapes, dtype and target, see
bulkinfer.kernels.target), Triton's own argument binder adds the alignment hints a real launch
passes, and each distinct variant is compiled once. Register and stack use come from the bundled
``cuobjdump --dump-resource-usage``.

A variant fails on a compile error, on shared memory above its target's limit, or on any spill
to local memory. The report (``--out``) lists registers, spills,
shared memory, warps and stages per kernel variant and target.

Adding a kernel: one ``KernelCheck`` entry in ``CHECKS`` whose function returns the launches its
launcher decides for a ``Shape`` on a target. Adding a kernel option (a constexpr such as the
attention's sliding window, softcap or sinks flags): its launches in the kernel's case function.

Usage: python -m bulkinfer.bench.compile_check [--matrix quick|sample|full] [--targets sm_80,sm_90]
       [--checks fp8_gemm,quantized_moe] [--out PATH] [--jobs N]
(TRITON_INTERPRET must be unset: interpreted kernels cannot be compiled.)
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from bulkinfer.kernels._triton import Launch, is_interpreted
from bulkinfer.kernels.causal_conv1d import causal_conv1d_launches
from bulkinfer.kernels.expert_weights import ExpertWeights
from bulkinfer.kernels.fp8_gemm import FP8, block_scales, fp8_gemm_launch, fp8_tensor_cores
from bulkinfer.kernels.fused_moe import align_by_expert, choose_block_m, grouped_gemm_launch
from bulkinfer.kernels.gated_delta_rule import chunk_gated_delta_rule_launches, delta_decode_launch
from bulkinfer.kernels.int_weight_gemm import int_weight_gemm_launch
from bulkinfer.kernels.lora import lora_expand_launch, lora_shrink_launch, token_groups
from bulkinfer.kernels.mamba_ssd import mamba_chunk_scan_launches, mamba_decode_launch
from bulkinfer.kernels.matmul import matmul_launch
from bulkinfer.kernels.mla_decode import mla_decode_launches
from bulkinfer.kernels.paged_attention import _extend_kernel, attention_launches
from bulkinfer.kernels.rms_norm import rms_norm_launch
from bulkinfer.kernels.rotary import rotary_launch
from bulkinfer.kernels.silu_mul import silu_and_mul_launch
from bulkinfer.kernels.store_kv import store_kv_launch
from bulkinfer.kernels.target import KNOWN_TARGETS, KernelTarget

DEFAULT_OUT = Path("benchmarks/results/kernels-compiled.json")
KV_HEADS = 2  # per rank; the head count is the group size times this


AttentionOptions = tuple[int, float, bool]  # (sliding_window, softcap, sinks); only whether each is on counts
PLAIN_ATTENTION: AttentionOptions = (0, 0.0, False)


@dataclass(frozen=True)
class Shape:
    head_dim: int
    group: int  # query heads per KV head
    block_size: int  # tokens per KV-cache block
    dtype: torch.dtype
    attention_variants: tuple[AttentionOptions, ...] = ((0, 0.0, False),)
    fp8_kv: bool = False  # the KV cache in e4m3 (kv_cache_dtype="fp8_e4m3") rather than in dtype

    @property
    def label(self) -> str:
        kv = "-kv_fp8" if self.fp8_kv else ""
        return f"d{self.head_dim}-g{self.group}-b{self.block_size}-{str(self.dtype).removeprefix('torch.')}{kv}"


@dataclass(frozen=True)
class Matrix:
    targets: tuple[str, ...]
    head_dims: tuple[int, ...]
    groups: tuple[int, ...]
    block_sizes: tuple[int, ...]
    dtypes: tuple[torch.dtype, ...]
    # Sliding window and soft-cap on and off, at the head sizes of the models that use them
    # (Mistral and Qwen2: 128; Gemma 2 and 3: 256); sinks alone and with a window (gpt-oss's full
    # and sliding layers) there and at gpt-oss's head size, 64; plain attention elsewhere. Only
    # whether each is on makes a variant: the values are runtime arguments of the kernels.
    attention_variants: tuple[AttentionOptions, ...] = (PLAIN_ATTENTION, (4096, 0.0, False), (0, 50.0, False),
                                                        (4096, 50.0, False), (0, 0.0, True), (128, 0.0, True))
    # Both KV caches everywhere: the FP8 one converts e4m3 with integer operations on every target.
    fp8_kv: tuple[bool, ...] = (False, True)

    def variants_at(self, head_dim: int) -> tuple[AttentionOptions, ...]:
        if head_dim >= 128:
            return self.attention_variants
        if head_dim == 64:
            return (PLAIN_ATTENTION,) + tuple(v for v in self.attention_variants if v[2] and not v[1])
        return (PLAIN_ATTENTION,)

    def shapes(self, target: KernelTarget) -> Iterable[Shape]:
        for head_dim in self.head_dims:
            variants = self.variants_at(head_dim)
            for group in self.groups:
                for block_size in self.block_sizes:
                    for dtype in self.dtypes:
                        for fp8_kv in self.fp8_kv:
                            yield Shape(head_dim, group, block_size, dtype, variants, fp8_kv)


FULL = Matrix(("sm_80", "sm_86", "sm_90"), (64, 80, 96, 128, 256), tuple(range(1, 9)), (16, 32),
              (torch.float16, torch.bfloat16))
# What the default test suite compiles (about 50 variants): the widest head size, the one that
# spilled before 8 warps, with a GQA group, on the two targets most deployments use; attention
# plain and with a window, a cap and sinks all on (each alone is in the full matrix).
QUICK = Matrix(("sm_80", "sm_90"), (256,), (4,), (16,), (torch.bfloat16,), (PLAIN_ATTENTION, (4096, 50.0, True)))
# What CI's slow suite compiles (about 120 variants): every kernel on every target, at the shape
# values the quick subset leaves out (a head size that is not a power of two, an odd GQA group, the
# larger block, fp16) and each attention option alone.
SAMPLE = Matrix(FULL.targets, (80, 128), (3,), (32,), (torch.float16,))
MATRICES = {"quick": QUICK, "sample": SAMPLE, "full": FULL}


# ----------------------------------------------------------------------------------------------
# What each launcher launches for one shape. Tensors are CPU tensors laid out as the model's are.


def _qkv(shape: Shape, tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key and value as the attention layer passes them: views of one fused projection."""
    heads, d = shape.group * KV_HEADS, shape.head_dim
    qkv = torch.zeros(tokens, (heads + 2 * KV_HEADS) * d, dtype=shape.dtype)
    q, k, v = qkv.split([heads * d, KV_HEADS * d, KV_HEADS * d], dim=-1)
    return q.view(tokens, heads, d), k.view(tokens, KV_HEADS, d), v.view(tokens, KV_HEADS, d)


def _cache(shape: Shape) -> torch.Tensor:
    dtype = torch.float8_e4m3fn if shape.fp8_kv else shape.dtype
    return torch.zeros(4, shape.block_size, KV_HEADS, shape.head_dim, dtype=dtype)


def attention_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """Mixed steps (extend + unsplit decode), a lone long decode (split + merge), batch-invariant;
    each for the shape's (sliding window, softcap, sinks) variants."""
    launches = []
    for sliding_window, softcap, has_sinks in shape.attention_variants:
        sinks = torch.zeros(shape.group * KV_HEADS) if has_sinks else None
        for num_seqs, num_splits, invariant in ((3, 1, False), (1, 16, False), (3, None, True)):
            q, _, _ = _qkv(shape, 8)
            cache = _cache(shape)
            tables = torch.zeros(num_seqs, 5, dtype=torch.int32)
            meta = (torch.zeros(num_seqs + 1, dtype=torch.int32), torch.zeros(num_seqs, dtype=torch.int32), tables)
            launches += attention_launches(q, cache, cache, torch.empty_like(q), *meta, shape.head_dim ** -0.5,
                                           target, sliding_window=sliding_window, softcap=softcap,
                                           num_splits=num_splits, batch_invariant=invariant, sinks=sinks)
    return launches


# (latent, rotary key): DeepSeek-V2, V3 and Kimi K2's multi-head latent attention; the head count is a runtime
# argument, 128 heads per rank the largest.
MLA_SHAPES = ((512, 64),)


def mla_decode_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """Absorbed MLA decode, unsplit over a batch and split (with the merge) for a lone long sequence; the
    attention shape lends its dtype and block size."""
    launches = []
    for latent_dim, rope_dim in MLA_SHAPES:
        cache = torch.zeros(4, shape.block_size, 1, latent_dim + rope_dim, dtype=shape.dtype)
        for num_seqs, num_splits in ((3, 1), (1, 16)):
            query = torch.zeros(num_seqs, 128, latent_dim + rope_dim, dtype=shape.dtype)
            meta = (torch.zeros(num_seqs, dtype=torch.int32), torch.zeros(num_seqs, 5, dtype=torch.int32))
            launches += mla_decode_launches(query, cache, query[..., :latent_dim], *meta, 0.1, latent_dim, target,
                                            num_splits=num_splits)
    return launches


def store_kv_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    _, k, v = _qkv(shape, 8)
    cache = _cache(shape)
    return [store_kv_launch(k, v, cache, cache, torch.zeros(8, dtype=torch.long))]


def rotary_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    q, k, _ = _qkv(shape, 8)
    table = torch.zeros(64, shape.head_dim, dtype=torch.float32)
    return [rotary_launch(torch.zeros(8, dtype=torch.long), q, k, table)]


def rms_norm_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """The hidden state (residual fused) and the per-head q/k norm of Qwen3."""
    launches = []
    for width, residual in ((shape.group * KV_HEADS * shape.head_dim, True), (shape.head_dim, False)):
        rows = torch.zeros(8, width, dtype=shape.dtype)
        launches.append(rms_norm_launch(rows, rows, torch.ones(width, dtype=shape.dtype), torch.empty_like(rows),
                                        torch.empty_like(rows), 1e-6, residual))
    return launches


def silu_mul_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """SiLU-and-mul, and gpt-oss's clamped SwiGLU."""
    inter = 4 * shape.group * KV_HEADS * shape.head_dim
    rows = torch.zeros(8, 2 * inter, dtype=shape.dtype)
    return [silu_and_mul_launch(rows, torch.empty(8, inter, dtype=shape.dtype), clamped_swiglu)
            for clamped_swiglu in (None, (7.0, 1.702))]


# (hidden, expert inter, experts, top_k, biased): Mixtral 8x7B, Qwen1.5-MoE-A2.7B, Qwen3-30B-A3B, and
# gpt-oss-20b, whose gate/up projection has a bias per expert.
MOE_SHAPES = ((4096, 14336, 8, 2, False), (2048, 1408, 60, 4, False), (2048, 768, 128, 8, False),
              (2880, 2880, 32, 4, True))


def fused_moe_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """Both grouped GEMMs for each MoE model shape and each row tile (decode to prefill sizes);
    the attention shape only lends its dtype. Weights are meta tensors: only their strides count."""
    launches = []
    for hidden, inter, experts, top_k, biased in MOE_SHAPES:
        bias = torch.zeros(experts, 2 * inter, dtype=shape.dtype) if biased else None
        w13 = torch.empty(experts, 2 * inter, hidden, dtype=shape.dtype, device="meta")
        w2 = torch.empty(experts, hidden, inter, dtype=shape.dtype, device="meta")
        for tokens in (4, 64, 1024):
            ids = torch.arange(tokens * top_k).remainder(experts).view(tokens, top_k)
            alignment = align_by_expert(ids, experts, choose_block_m(tokens * top_k, experts))
            x = torch.zeros(tokens, hidden, dtype=shape.dtype)
            gate_up = torch.zeros(tokens * top_k, 2 * inter, dtype=shape.dtype)
            act = torch.zeros(tokens * top_k, inter, dtype=shape.dtype)
            down = torch.zeros(tokens * top_k, hidden, dtype=shape.dtype)
            launches += [grouped_gemm_launch(x, w13, gate_up, alignment, top_k, target, bias=bias),
                         grouped_gemm_launch(act, w2, down, alignment, 1, target, torch.zeros(tokens * top_k))]
    return launches


# Quantized experts, one model per format: Qwen3-30B-A3B (FP8 blocks of 128, INT4 with zeros in
# groups of 128, INT8 per channel) and gpt-oss-20b (MXFP4, hidden and expert width 2,880, a gate/up bias).
QUANTIZED_MOE_SHAPES = {"fp8": (2048, 768, 128, 8), "int4": (2048, 768, 128, 8), "int8": (2048, 768, 128, 8),
                        "mxfp4": (2880, 2880, 32, 4)}


def _quantized_experts(fmt: str, experts: int, n: int, k: int, dtype: torch.dtype) -> ExpertWeights:
    """Meta tensors laid out as a loader stacks them: only shapes and strides count."""
    def meta(*size, dtype):
        return torch.empty(*size, dtype=dtype, device="meta")

    if fmt == "fp8":
        return ExpertWeights.fp8(meta(experts, n, k, dtype=FP8), meta(experts, -(-n // 128), -(-k // 128),
                                                                       dtype=torch.float32), (128, 128))
    if fmt == "mxfp4":
        return ExpertWeights.mxfp4(meta(experts, n, k // 32, 16, dtype=torch.uint8),
                                   meta(experts, n, k // 32, dtype=torch.uint8))
    bits, group = (4, 128) if fmt == "int4" else (8, k)
    zeros = meta(experts, n, k // group, dtype=torch.uint8) if bits == 4 else None
    return ExpertWeights.int_weight(meta(experts, n, k * bits // 32, dtype=torch.int32),
                                    meta(experts, n, k // group, dtype=dtype), zeros, group, bits)


def quantized_moe_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """Both grouped GEMMs over each quantized expert format, at decode and prefill row tiles."""
    launches = []
    for fmt, (hidden, inter, experts, top_k) in QUANTIZED_MOE_SHAPES.items():
        w13 = _quantized_experts(fmt, experts, 2 * inter, hidden, shape.dtype)
        w2 = _quantized_experts(fmt, experts, hidden, inter, shape.dtype)
        bias = torch.zeros(experts, 2 * inter, dtype=shape.dtype) if fmt == "mxfp4" else None
        for tokens in (4, 1024):
            ids = torch.arange(tokens * top_k).remainder(experts).view(tokens, top_k)
            alignment = align_by_expert(ids, experts, choose_block_m(tokens * top_k, experts))
            x = torch.zeros(tokens, hidden, dtype=shape.dtype)
            act = torch.zeros(tokens * top_k, inter, dtype=shape.dtype)
            launches += [grouped_gemm_launch(x, w13, torch.zeros(tokens * top_k, 2 * inter, dtype=shape.dtype),
                                             alignment, top_k, target, bias=bias),
                         grouped_gemm_launch(act, w2, torch.zeros(tokens * top_k, hidden, dtype=shape.dtype),
                                             alignment, 1, target, torch.zeros(tokens * top_k))]
    return launches


def _projections(shape: Shape) -> tuple[int, list[int]]:
    """The hidden size and the output widths of a layer's fused QKV and MLP gate/up projections."""
    hidden = shape.group * KV_HEADS * shape.head_dim
    return hidden, [(shape.group + 2) * KV_HEADS * shape.head_dim, 4 * hidden]


def int_weight_gemm_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """INT4 in groups of 128 (32 where the hidden size is no multiple of 128), with and without zeros,
    and INT8 per channel, at decode and prefill row counts."""
    hidden, (_, n) = _projections(shape)
    group = 128 if hidden % 128 == 0 else 32
    launches = []
    for bits, group, zeros in ((4, group, True), (4, group, False), (8, hidden, False)):
        for rows in (8, 512):
            x = torch.zeros(rows, hidden, dtype=shape.dtype)
            qweight = torch.empty(n, hidden * bits // 32, dtype=torch.int32, device="meta")
            scales = torch.empty(n, hidden // group, dtype=shape.dtype, device="meta")
            zero = torch.empty(n, hidden // group, dtype=torch.uint8, device="meta") if zeros else None
            launches.append(int_weight_gemm_launch(x, qweight, scales, zero, group, bits,
                                                   torch.empty(rows, n, dtype=shape.dtype), target))
    return launches


def fp8_gemm_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """Per-channel and 128 x 128 block scales, at decode and prefill row counts; FP8 activations
    where the target has FP8 tensor cores, else weight-only."""
    hidden, (_, n) = _projections(shape)
    weight = torch.empty(n, hidden, dtype=FP8, device="meta")
    launches = []
    for weight_scale, block_size in ((torch.empty(n), None), (torch.empty(-(-n // 128), -(-hidden // 128)),
                                                               (128, 128))):
        scales = block_scales(weight, weight_scale, block_size)
        for rows in (8, 512):
            x = torch.zeros(rows, hidden, dtype=shape.dtype)
            activations, activation_scales = (
                (torch.zeros(rows, hidden, dtype=FP8), torch.zeros(rows, -(-hidden // scales.block_k)))
                if fp8_tensor_cores(target) else (x, None))
            launches.append(fp8_gemm_launch(activations, activation_scales, weight, scales,
                                            torch.empty(rows, n, dtype=shape.dtype), target))
    return launches


def matmul_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """The batch-invariant linear layer (deterministic=True on a GPU) at this shape's projections."""
    hidden, widths = _projections(shape)
    x = torch.zeros(8, hidden, dtype=shape.dtype)
    launches = []
    for out_features in widths:
        weight = torch.empty(out_features, hidden, dtype=shape.dtype, device="meta")
        bias = torch.zeros(out_features, dtype=shape.dtype)
        launches.append(matmul_launch(x, weight, bias, torch.empty(8, out_features, dtype=shape.dtype), target))
    return launches


# LoRA: ranks 8 to max_lora_rank 64, at an 8B model's widths and the widest supported (16k);
# a decode step (64 tokens over 8 adapters, a few per adapter) and a prefill (2,048 tokens).
LORA_RANKS = (8, 16, 32, 64)
LORA_WIDTHS = ((4096, 6144), (14336, 4096), (16384, 16384))  # (hidden, out): qkv, down, the widest
LORA_SLOTS = 8


def lora_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """Shrink and expand for each rank, width and token count; the attention shape lends its dtype.
    Adapter weights are meta tensors: only their strides count."""
    launches = []
    for tokens in (64, 2048):
        batch = token_groups(torch.arange(tokens).remainder(LORA_SLOTS + 1) - 1)  # every slot, and base rows
        for rank in LORA_RANKS:
            for hidden, out_features in LORA_WIDTHS:
                lora_a = torch.empty(LORA_SLOTS, rank, hidden, dtype=shape.dtype, device="meta")
                lora_b = torch.empty(LORA_SLOTS, out_features, rank, dtype=shape.dtype, device="meta")
                y = torch.zeros(tokens, rank, dtype=shape.dtype)
                launches += [lora_shrink_launch(torch.zeros(tokens, hidden, dtype=shape.dtype), lora_a, batch, y,
                                                1.0, target),
                             lora_expand_launch(y, lora_b, batch, torch.zeros(tokens, out_features, dtype=shape.dtype),
                                                torch.ones(LORA_SLOTS), target)]
    return launches


# Hybrid models' recurrent layers. Gated delta rule: (v heads, Dk, Dv) of Qwen3-Next-80B (q and k
# repeated from 16 to its 32 value heads); Qwen3.5's linear attention has the same head sizes, and the
# head count is a runtime argument. Mamba2: (heads, head_dim, state, groups) of Granite-4.0-H
# and Falcon-H1. Conv: (channels, taps) of each model's convolution in front of them.
DELTA_SHAPES = ((32, 128, 128),)
MAMBA_SHAPES = ((128, 64, 128, 1), (24, 128, 256, 1))
CONV_SHAPES = ((8192, 4), (8448, 4), (3584, 4))
HYBRID_SLOTS = 8


def _step(tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(slots, query_start_loc, has_initial_state) of a prefill of 3 sequences when ``tokens`` > 3,
    else of a decode step of one token per sequence."""
    seqs = min(tokens, 3)
    bounds = torch.linspace(0, tokens, seqs + 1).round().to(torch.int32)
    return torch.arange(seqs), bounds, torch.ones(seqs, dtype=torch.bool)


def causal_conv1d_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    launches = []
    for channels, taps in CONV_SHAPES:
        for tokens in (3, 512):
            slots, bounds, initial = _step(tokens)
            x = torch.zeros(tokens, channels, dtype=shape.dtype)
            states = torch.zeros(HYBRID_SLOTS, channels, taps - 1, dtype=shape.dtype)
            launches += causal_conv1d_launches(x, torch.zeros(channels, taps, dtype=shape.dtype),
                                               torch.zeros(channels, dtype=shape.dtype), states, slots, bounds,
                                               initial, "silu", torch.empty_like(x),
                                               torch.zeros(tokens, dtype=torch.long))
    return launches


def gated_delta_rule_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """A 512-token prefill of 3 sequences (the chunked kernels) and a decode step (the one-token kernel),
    in the shape's dtype and in fp32 (whose chunked kernels take other tiles)."""
    launches = []
    for (heads, dk, dv), dtype in itertools.product(DELTA_SHAPES, (shape.dtype, torch.float32)):
        for tokens in (3, 512):
            slots, bounds, initial = _step(tokens)
            qk = torch.zeros(tokens, heads, dk, dtype=dtype)
            v = torch.zeros(tokens, heads, dv, dtype=dtype)
            gates = torch.zeros(tokens, heads, dtype=dtype)
            states = torch.zeros(HYBRID_SLOTS, heads, dk, dv)
            if tokens > 3:
                launches += chunk_gated_delta_rule_launches(qk, qk, v, gates, gates, states, slots, bounds, initial,
                                                            dk ** -0.5, torch.empty_like(v))
            else:
                launches.append(delta_decode_launch(qk, qk, v, gates, gates, states, slots, dk ** -0.5,
                                                    torch.empty_like(v)))
    return launches


def mamba_scan_cases(shape: Shape, target: KernelTarget) -> list[Launch]:
    """A 512-token prefill of 3 sequences (the chunked kernels) and a decode step (the one-token kernel),
    in the shape's dtype and in fp32 (whose chunked kernels take other tiles)."""
    launches = []
    for (heads, head_dim, state_size, groups), dtype in itertools.product(MAMBA_SHAPES, (shape.dtype, torch.float32)):
        for tokens in (3, 512):
            slots, bounds, initial = _step(tokens)
            x = torch.zeros(tokens, heads, head_dim, dtype=dtype)
            dt = torch.zeros(tokens, heads, dtype=dtype)
            bc = torch.zeros(tokens, groups, state_size, dtype=dtype)
            per_head = torch.zeros(heads)
            states = torch.zeros(HYBRID_SLOTS, heads, head_dim, state_size)
            if tokens > 3:
                launches += mamba_chunk_scan_launches(x, dt, per_head, bc, bc, per_head, per_head, states, slots,
                                                      bounds, initial, True, torch.empty_like(x))
            else:
                launches.append(mamba_decode_launch(x, dt, per_head, bc, bc, per_head, per_head, states, slots, True,
                                                    torch.empty_like(x)))
    return launches


@dataclass(frozen=True)
class KernelCheck:
    name: str
    launches: Callable[[Shape, KernelTarget], list[Launch]]


CHECKS: tuple[KernelCheck, ...] = (
    KernelCheck("paged_attention", attention_cases),
    KernelCheck("mla_decode", mla_decode_cases),
    KernelCheck("store_kv", store_kv_cases),
    KernelCheck("rotary", rotary_cases),
    KernelCheck("rms_norm", rms_norm_cases),
    KernelCheck("silu_mul", silu_mul_cases),
    KernelCheck("fused_moe", fused_moe_cases),
    KernelCheck("matmul", matmul_cases),
    KernelCheck("int_weight_gemm", int_weight_gemm_cases),
    KernelCheck("fp8_gemm", fp8_gemm_cases),
    KernelCheck("quantized_moe", quantized_moe_cases),
    KernelCheck("lora", lora_cases),
    KernelCheck("causal_conv1d", causal_conv1d_cases),
    KernelCheck("gated_delta_rule", gated_delta_rule_cases),
    KernelCheck("mamba_scan", mamba_scan_cases),
)


# ----------------------------------------------------------------------------------------------
# Binding, compiling and reading the resource usage.


@dataclass
class Variant:
    """One compiled kernel variant on one target, and what it costs there."""

    kernel: str
    target: str
    check: str
    constexprs: dict
    num_warps: int
    num_stages: int
    shapes: list[str] = field(default_factory=list)
    registers: int | None = None
    stack_bytes: int | None = None
    local_bytes: int | None = None
    shared_bytes: int | None = None
    shared_limit: int = 0
    problems: list[str] = field(default_factory=list)


def bind(launch: Launch, target: KernelTarget):
    """What Triton compiles for ``launch`` on ``target``: (source, options, key), with the
    specializations (alignment hints, constant 1s) its binder derives from the arguments."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    kernel = launch.kernel
    backend = make_backend(GPUTarget("cuda", target.arch, 32))
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.options)
    options, signature, constexprs, attrs = kernel._pack_args(backend, launch.options, bound, specialization, options)
    key = repr((kernel.__name__, target.name, signature, constexprs, attrs, sorted(options.__dict__.items())))
    return ASTSource(kernel, signature, constexprs, attrs), options, key


def variants(matrix: Matrix, checks: Iterable[KernelCheck] = CHECKS) -> dict[str, tuple[Variant, Launch]]:
    """Each distinct compile of the matrix, keyed by what Triton would cache it under."""
    found: dict[str, tuple[Variant, Launch]] = {}
    for target_name in matrix.targets:
        target = KNOWN_TARGETS[target_name]
        for shape in matrix.shapes(target):
            for check in checks:
                for launch in check.launches(shape, target):
                    _, options, key = bind(launch, target)
                    if key not in found:
                        constexprs = {k: v for k, v in launch.options.items() if k not in ("num_warps", "num_stages")}
                        found[key] = (Variant(launch.kernel.__name__, target.name, check.name,
                                              constexprs, options.num_warps, options.num_stages,
                                              shared_limit=target.shared_memory), launch)
                    found[key][0].shapes.append(shape.label)
    return found


_USAGE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def resource_usage(cubin: bytes) -> tuple[int, int, int]:
    """(registers, stack bytes, local bytes) of the cubin's kernel, by the cuobjdump Triton ships."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        text = subprocess.run([str(tool), "--dump-resource-usage", file.name], capture_output=True, text=True,
                              check=True).stdout
    registers, stack, _, local = map(int, _USAGE.search(text).groups())
    return registers, stack, local


_ITEMS: list[tuple[Variant, Launch]] = []  # what forked compiling processes read by index (kernels do not pickle)


def _compile_item(index: int) -> Variant:
    return compile_variant(*_ITEMS[index])


def compile_variant(variant: Variant, launch: Launch) -> Variant:
    import triton

    target = KNOWN_TARGETS[variant.target]
    source, options, _ = bind(launch, target)
    try:
        compiled = triton.compile(source, target=_gpu_target(target), options=options.__dict__)
    except Exception as exc:  # noqa: BLE001  (any failure to compile is the finding)
        variant.problems.append(f"compile error: {str(exc).strip().splitlines()[-1] if str(exc) else type(exc).__name__}")
        return variant
    variant.shared_bytes = compiled.metadata.shared
    variant.registers, variant.stack_bytes, variant.local_bytes = resource_usage(compiled.asm["cubin"])
    if variant.shared_bytes > target.shared_memory:
        variant.problems.append(f"shared memory {variant.shared_bytes} B above the target's {target.shared_memory} B")
    if variant.stack_bytes or variant.local_bytes:
        variant.problems.append(f"spills: {variant.registers} registers, {variant.stack_bytes} B stack, "
                                f"{variant.local_bytes} B local")
    return variant


def _gpu_target(target: KernelTarget):
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", target.arch, 32)


def run(matrix: Matrix, jobs: int = 1, checks: Iterable[KernelCheck] = CHECKS) -> list[Variant]:
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, stated to silence its notice
    if is_interpreted(_extend_kernel):
        raise RuntimeError("the compile check needs compiled kernels: unset TRITON_INTERPRET before importing bulkinfer")
    _ITEMS[:] = variants(matrix, checks).values()
    if jobs <= 1:
        return [_compile_item(index) for index in range(len(_ITEMS))]
    # Leaving the block terminates the pool, on Ctrl-C too: each worker then ends its ptxas with it.
    with multiprocessing.get_context("fork").Pool(jobs, initializer=_start_worker) as pool:
        return pool.map(_compile_item, range(len(_ITEMS)), chunksize=1)


def _start_worker() -> None:
    """Make the compiling process the leader of a process group that ends whole when the pool
    ends, so that an interrupted check stops its workers and the ptxas they run, not only itself."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent hears Ctrl-C and terminates the pool
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))  # the worker and its ptxas
    if sys.platform == "linux":  # a parent killed outright (as pytest kills it on Ctrl-C) sends SIGTERM too
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == 1:  # the parent ended before the line above
            os.killpg(0, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def report(matrix: Matrix, results: list[Variant], checks: Iterable[KernelCheck] = CHECKS) -> dict:
    import triton

    return {
        "triton": triton.__version__,
        "targets": {name: asdict(KNOWN_TARGETS[name]) for name in matrix.targets},
        "checks": [check.name for check in checks],
        "matrix": {"head_dims": matrix.head_dims, "groups": matrix.groups, "block_sizes": matrix.block_sizes,
                   "dtypes": [str(d).removeprefix("torch.") for d in matrix.dtypes],
                   "attention_variants (sliding_window, softcap, sinks) at head_dim >= 128, sinks at 64":
                       matrix.attention_variants},
        "variants": len(results),
        "failures": sum(1 for v in results if v.problems),
        "kernels": [asdict(v) for v in results],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--matrix", choices=MATRICES, default="quick",
                        help="quick: what the default tests compile; sample: CI's subset over every target; "
                             "full: every supported shape (default: quick)")
    parser.add_argument("--targets", help="comma-separated, from " + ", ".join(KNOWN_TARGETS))
    parser.add_argument("--checks", help="comma-separated, from " + ", ".join(c.name for c in CHECKS) + " (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the JSON report (default: {DEFAULT_OUT})")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1) // 2), help="compiling processes")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # a timeout ends the pool too
    matrix = MATRICES[args.matrix]
    if args.targets:
        unknown = set(args.targets.split(",")) - set(KNOWN_TARGETS)
        if unknown:
            parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
        matrix = replace(matrix, targets=tuple(args.targets.split(",")))
    checks = CHECKS
    if args.checks:
        checks = tuple(c for c in CHECKS if c.name in args.checks.split(","))
        unknown = set(args.checks.split(",")) - {c.name for c in checks}
        if unknown:
            parser.error(f"unknown checks: {', '.join(sorted(unknown))}")
    results = run(matrix, args.jobs, checks)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report(matrix, results, checks), indent=1) + "\n")
    for variant in results:
        for problem in variant.problems:
            print(f"FAIL {variant.target} {variant.kernel} {variant.constexprs}: {problem}", file=sys.stderr)
    failures = sum(1 for v in results if v.problems)
    print(f"compiled {len(results)} kernel variants for {', '.join(matrix.targets)}: {failures} failing; "
          f"report in {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
