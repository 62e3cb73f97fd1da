"""Rotary embedding frequencies: plain, linear-scaled and llama3-scaled, as one cos/sin table."""

from __future__ import annotations

import math

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def inverse_frequencies(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        return _llama3_scaled(inv_freq, scaling)
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


def cos_sin_cache(head_dim: int, max_position: int, theta: float,
                  scaling: dict | None) -> torch.Tensor:  # [max_position, head_dim] fp32
    """Computed on the CPU (the same bits on every machine), then moved to the default device,
    so a model built under ``with torch.device(...)`` gets its table there with its weights."""
    with torch.device("cpu"):
        inv_freq = inverse_frequencies(head_dim, theta, scaling)
        angles = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
        table = torch.cat((angles.cos(), angles.sin()), dim=-1)
    return table.to(torch.get_default_device())
