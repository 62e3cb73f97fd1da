"""Rotary embedding frequencies: plain, linear-scaled, llama3-scaled and YaRN-scaled, as one cos/sin table."""

from __future__ import annotations

import math

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def inverse_frequencies(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        return _llama3_scaled(inv_freq, scaling)
    if rope_type == "yarn":
        return _yarn_scaled(inv_freq, head_dim, theta, scaling)
    raise ValueError(f"rope scaling type {rope_type!r} is not supported "
                     f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)})")


def _llama3_scaled(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Long wavelengths are slowed by `factor`, short ones kept, and the band between is blended.
    factor = scaling["factor"]
    low_freq_factor = scaling.get("low_freq_factor", 1.0)
    high_freq_factor = scaling.get("high_freq_factor", 4.0)
    old_len = scaling.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_len / low_freq_factor
    high_freq_wavelen = old_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    in_band = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(in_band, blended, scaled)


def _yarn_scaled(inv_freq: torch.Tensor, head_dim: int, theta: float, scaling: dict) -> torch.Tensor:
    # YaRN (gpt-oss): dimensions turning fewer than beta_slow times over the original context are
    # slowed by `factor`, those turning more than beta_fast times kept, and a linear ramp between.
    factor = scaling["factor"]
    old_len = scaling["original_max_position_embeddings"]

    def dim_turning(rotations: float) -> float:  # the dimension that turns `rotations` times over old_len
        return head_dim * math.log(old_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_turning(scaling.get("beta_fast") or 32), dim_turning(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / max(high - low, 0.001)).clamp(0, 1)
    return inv_freq / factor * ramp + inv_freq * (1 - ramp)


def attention_factor(scaling: dict | None) -> float:
    """What YaRN multiplies cos and sin by (so each score by its square): 0.1 ln(factor) + 1, or the
    config's own ``attention_factor``; 1 for the other rope types."""
    scaling = scaling or {}
    if scaling.get("rope_type", scaling.get("type")) != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return _yarn_mscale(scaling["factor"], mscale) / _yarn_mscale(scaling["factor"], mscale_all_dim)
    return _yarn_mscale(scaling["factor"])


def softmax_mscale(scaling: dict | None) -> float:
    """What DeepSeek's YaRN multiplies the softmax scale by besides cos and sin: mscale(factor, mscale_all_dim)
    squared; 1 without ``mscale_all_dim`` or without scaling."""
    scaling = scaling or {}
    if scaling.get("rope_type", scaling.get("type", "default")) == "default" or not scaling.get("mscale_all_dim"):
        return 1.0
    return _yarn_mscale(scaling["factor"], scaling["mscale_all_dim"]) ** 2


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def cos_sin_cache(head_dim: int, max_position: int, theta: float,
                  scaling: dict | None) -> torch.Tensor:  # [max_position, head_dim] fp32
    """Computed on the CPU (the same bits on every machine), then moved to the default device,
    so a model built under ``with torch.device(...)`` gets its table there with its weights."""
    with torch.device("cpu"):
        inv_freq = inverse_frequencies(head_dim, theta, scaling)
        angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
        table = torch.cat((angles.cos(), angles.sin()), dim=-1) * attention_factor(scaling)
    return table.to(torch.get_default_device())
