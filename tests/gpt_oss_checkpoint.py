"""A tiny random gpt-oss checkpoint, made with transformers' own GptOssConfig and model classes.

It has what makes gpt-oss gpt-oss, at toy sizes: alternating sliding-window (8 tokens, so test prompts
cross it) and full-attention layers with a learned sink per head, q/k/v/o biases, YaRN rotary scaling,
and a mixture of experts with a biased router, biased experts and the clamped SwiGLU. Every bias and
sink is random (transformers initializes expert biases to zero), so each one shows in the logits.
The tokenizer and chat template are harmony's (tests/harmony_checkpoint.py). Its experts can also be written
in MXFP4, as the released checkpoints store them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import GenerationConfig, GptOssConfig

from bulkinfer.kernels.mxfp4 import E2M1_VALUES, E8M0_BIAS
from checkpoints import _random_model
from harmony_checkpoint import HARMONY_IDS, VOCAB_SIZE, build_harmony_tokenizer

SLIDING_WINDOW = 8
# gpt-oss's own YaRN parameters, the original context shrunk from 4,096 so test positions pass it.
YARN = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": False, "original_max_position_embeddings": 64}
SIZES = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=512,
             sliding_window=SLIDING_WINDOW, rope_parameters=YARN, initializer_range=0.3, rms_norm_eps=1e-5)


def gpt_oss_config(**overrides) -> GptOssConfig:
    ids = dict(bos_token_id=HARMONY_IDS["<|startoftext|>"], pad_token_id=HARMONY_IDS["<|endoftext|>"],
               eos_token_id=HARMONY_IDS["<|return|>"])
    return GptOssConfig(**{**SIZES, **ids, "vocab_size": VOCAB_SIZE, "tie_word_embeddings": True, **overrides})


def make_gpt_oss_checkpoint(path: str | Path, **overrides) -> Path:
    """The random model and harmony's tokenizer, saved in fp32; it stops where gpt-oss's generation config says."""
    path = Path(path)
    tokenizer = build_harmony_tokenizer()
    config = gpt_oss_config(**overrides)
    model = _random_model(config, len(tokenizer), seed=31, dtype="float32")
    generator = torch.Generator().manual_seed(32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias") or name.endswith("sinks"):
                param.copy_(torch.randn(param.shape, generator=generator) * config.initializer_range)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, pad_token_id=config.pad_token_id,
        eos_token_id=[HARMONY_IDS["<|return|>"], HARMONY_IDS["<|call|>"], HARMONY_IDS["<|endoftext|>"]])
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def quantize_mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [..., N, K] -> MXFP4 (blocks [..., N, K // 32, 16], scales [..., N, K // 32]), the layout of
    kernels/mxfp4.py: each group of 32 scaled by the power of two that brings its largest value to at most
    6, every value rounded to the nearest e2m1."""
    groups = weight.float().unflatten(-1, (-1, 32))  # [..., N, G, 32]
    amax = groups.abs().amax(-1).clamp(min=2.0 ** -120)
    exponent = torch.ceil(torch.log2(amax / 6.0))
    table = torch.tensor(E2M1_VALUES)
    codes = ((groups / torch.exp2(exponent)[..., None])[..., None] - table).abs().argmin(-1)  # [..., N, G, 32]
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return blocks, (exponent + E8M0_BIAS).to(torch.uint8)


def write_mxfp4_checkpoint(src: Path, out: Path) -> tuple[Path, Path]:
    """``src``'s experts in MXFP4 as gpt-oss ships them (``*_blocks``/``*_scales``, quant_method mxfp4), and the
    same model with those experts dequantized by transformers' own gpt-oss code, as a plain checkpoint."""
    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    tensors = load_file(src / "model.safetensors")
    quantized, dequantized = {}, {}
    for name, tensor in tensors.items():
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            quantized[name] = dequantized[name] = tensor
            continue
        blocks, scales = quantize_mxfp4(tensor.transpose(1, 2))  # [E, in, out] -> [E, out, in]
        quantized[f"{name}_blocks"], quantized[f"{name}_scales"] = blocks, scales
        dequantized[name] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # [E, in, out]
    config = json.loads((src / "config.json").read_text())
    paths = (out / "mxfp4", out / "dequantized")
    for path, weights, extra in zip(paths, (quantized, dequantized), ({"quant_method": "mxfp4"}, None)):
        shutil.copytree(src, path)
        save_file({k: v.contiguous() for k, v in weights.items()}, path / "model.safetensors", metadata={"format": "pt"})
        if extra:
            (path / "config.json").write_text(json.dumps(config | {"quantization_config": extra}))
    return paths
