"""Tiny quantized checkpoints in each format's exact on-disk layout, made from a plain tiny checkpoint.

compressed-tensors' formats are written by compressed-tensors itself (its compressors, as
llm-compressor calls them). fp8 block, GPTQ and AWQ have no writer that runs here, so they are
written by their published layouts (vLLM's and the formats' own documentation), with code that
shares nothing with bulkinfer's loader. Each writer that has no independent reader also writes the
reference: the same model with the dequantized weights, as a plain checkpoint.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")  # w: Mixtral's experts
# A layer's on-disk tensors (by suffix) and the weight they stand for.
Quantizer = Callable[[torch.Tensor], tuple[dict[str, torch.Tensor], torch.Tensor]]


def _copy_plain_files(src: Path, out: Path) -> None:
    out.mkdir(parents=True)
    for file in src.iterdir():
        if file.suffix != ".safetensors":
            shutil.copy(file, out / file.name)


def _is_linear(name: str) -> bool:
    return name.startswith("model.layers.") and name.endswith(".weight") and name.split(".")[-2] in LINEARS


def write_by_layout(src: Path, out: Path, quantization_config: dict, quantize: Quantizer) -> tuple[Path, Path]:
    """(the quantized checkpoint, the reference with its dequantized weights), every linear layer of the
    decoder quantized by ``quantize``."""
    reference = out.with_name(out.name + "-dequantized")
    _copy_plain_files(src, out)
    _copy_plain_files(src, reference)
    tensors = load_file(src / "model.safetensors")
    quantized, plain = {}, {}
    for name, tensor in tensors.items():
        if _is_linear(name):
            parts, dequantized = quantize(tensor.float())
            layer = name.removesuffix(".weight")
            quantized |= {f"{layer}.{suffix}": value.contiguous() for suffix, value in parts.items()}
            plain[name] = dequantized.to(tensor.dtype)
        else:
            quantized[name] = plain[name] = tensor
    save_file(quantized, out / "model.safetensors", metadata={"format": "pt"})
    save_file(plain, reference / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config | {"quantization_config": quantization_config}))
    return out, reference


# ---- fp8, block-wise (Qwen3-FP8, DeepSeek-V3) ----------------------------------------------------

def fp8_block_quantizer(block: tuple[int, int]) -> Quantizer:
    bn, bk = block

    def quantize(w: torch.Tensor):
        n, k = w.shape
        blocks = w.view(n // bn, bn, k // bk, bk)
        scale = blocks.abs().amax(dim=(1, 3)) / 448.0  # e4m3's largest value
        q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
        dequantized = (q.float() * scale[:, None, :, None]).view(n, k)
        return {"weight": q.view(n, k), "weight_scale_inv": scale}, dequantized

    return quantize


def fp8_block_config(block: tuple[int, int]) -> dict:
    return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": list(block)}


# ---- integers: GPTQ and AWQ --------------------------------------------------------------------

def _int_grid(w: torch.Tensor, bits: int, group: int, symmetric: bool, columns: torch.Tensor):
    """Round w [N, K] to integers in groups of input columns (group j: columns[j * group: (j + 1) * group]).
    -> (q [N, K], scales [N, G] as fp16, zeros [N, G], dequantized w)."""
    n, k = w.shape
    grouped = w[:, columns].view(n, k // group, group)
    top = 2 ** bits - 1
    if symmetric:
        scale = grouped.abs().amax(-1) / (2 ** (bits - 1) - 1)
        zero = torch.full_like(scale, 2 ** (bits - 1))
    else:
        low, high = grouped.amin(-1).clamp(max=0), grouped.amax(-1).clamp(min=0)
        scale = (high - low) / top
        zero = torch.round(-low / scale).clamp(1, top)  # GPTQ's v1 format cannot store a zero point of 0
    scale = scale.half().float()
    q_grouped = torch.clamp(torch.round(grouped / scale[..., None]) + zero[..., None], 0, top)
    q = torch.empty(n, k)
    q[:, columns] = q_grouped.view(n, k)
    group_of = torch.empty(k, dtype=torch.int64)
    group_of[columns] = torch.arange(k) // group
    dequantized = (q - zero[:, group_of]) * scale[:, group_of]
    return q.to(torch.int64), scale.half(), zero.to(torch.int64), dequantized, group_of


def _pack_rows(values: torch.Tensor, bits: int, order: list[int] | None = None) -> torch.Tensor:
    """Values [R, C] -> int32 [R * bits / 32, C]: word i holds rows i * per + order[j] at bit j * bits."""
    per = 32 // bits
    order = order or list(range(per))
    chunks = values.view(-1, per, values.shape[1])
    words = sum(chunks[:, order[j]] << (bits * j) for j in range(per))
    return (words - ((words >> 31) << 32)).to(torch.int32)  # two's complement into int32


def gptq_quantizer(bits: int, group: int, desc_act: bool, symmetric: bool) -> Quantizer:
    """group -1: one group of every input column (a scale per output channel), as GPTQ writes it."""
    def quantize(w: torch.Tensor):
        k = w.shape[1]
        columns = torch.randperm(k, generator=torch.Generator().manual_seed(k)) if desc_act else torch.arange(k)
        q, scale, zero, dequantized, group_of = _int_grid(w, bits, k if group == -1 else group, symmetric, columns)
        parts = {"qweight": _pack_rows(q.t().contiguous(), bits), "scales": scale.t(),
                 "qzeros": _pack_rows(((zero - 1) & (2 ** bits - 1)).contiguous(), bits).t(),
                 "g_idx": group_of.to(torch.int32)}
        return parts, dequantized

    return quantize


def gptq_config(bits: int, group: int, desc_act: bool, symmetric: bool) -> dict:
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": desc_act, "sym": symmetric,
            "checkpoint_format": "gptq"}


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def awq_quantizer(group: int) -> Quantizer:
    def quantize(w: torch.Tensor):
        q, scale, zero, dequantized, _ = _int_grid(w, 4, group, False, torch.arange(w.shape[1]))
        # Packed along the output columns: rows of the transposed [N, K] -> [K, N / 8].
        parts = {"qweight": _pack_rows(q.contiguous(), 4, AWQ_ORDER).t(), "scales": scale.t(),
                 "qzeros": _pack_rows(zero.contiguous(), 4, AWQ_ORDER).t()}
        return parts, dequantized

    return quantize


def awq_config(group: int) -> dict:
    return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}


# ---- compressed-tensors, written by compressed-tensors ---------------------------------------------

def write_compressed_tensors(src: Path, out: Path, weights: dict, compression_format: str,
                             input_activations: dict | None = None) -> Path:
    """Quantize every decoder linear layer of ``src`` (lm_head ignored) with min-max scales and save it
    through compressed-tensors' ModelCompressor, as llm-compressor does."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs, QuantizationConfig, QuantizationScheme, QuantizationStatus, apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    args = QuantizationArgs(**weights)
    inputs = QuantizationArgs(**input_activations) if input_activations else None
    scheme = QuantizationScheme(targets=["Linear"], weights=args, input_activations=inputs)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"],
                                                        quantization_status=QuantizationStatus.INITIALIZED))
    for module in model.modules():
        if hasattr(module, "weight_scale"):
            w = module.weight.data
            grouped = w.view(w.shape[0], -1, args.group_size or w.shape[1])
            if args.strategy == "tensor":
                grouped = w.reshape(1, 1, -1)
            if args.strategy == "block":  # [N / bn, K / bk, bn * bk]
                bn, bk = args.block_structure
                grouped = w.view(w.shape[0] // bn, bn, -1, bk).transpose(1, 2).reshape(w.shape[0] // bn, -1, bn * bk)
            scale, zero = calculate_qparams(grouped.amin(-1), grouped.amax(-1), args)
            module.weight_scale.data.copy_(scale.view_as(module.weight_scale))
            if hasattr(module, "weight_zero_point"):
                module.weight_zero_point.data.copy_(zero.view_as(module.weight_zero_point))
    compressor = ModelCompressor.from_pretrained_model(model, compression_format)
    compressor.compress_model(model)
    model.save_pretrained(out)
    compressor.update_config(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(src / name, out / name)
    return out
