"""Our rotary tables against transformers' rope initialization: YaRN at gpt-oss's parameters."""

from __future__ import annotations

import pytest
import torch
from transformers import GptOssConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from bulkinfer.layers.rotary import attention_factor, cos_sin_cache, inverse_frequencies

# gpt-oss-20b's and -120b's rope_scaling, and the same with transformers' default truncation.
GPT_OSS_YARN = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096}


@pytest.mark.parametrize("yarn", [GPT_OSS_YARN, {**GPT_OSS_YARN, "truncate": True}], ids=["gpt-oss", "truncated"])
def test_yarn_matches_transformers(yarn):
    theta, head_dim = 150000.0, 64
    config = GptOssConfig(rope_parameters={**yarn, "rope_theta": theta}, max_position_embeddings=131072)
    expected_inv_freq, expected_factor = ROPE_INIT_FUNCTIONS["yarn"](config)
    torch.testing.assert_close(inverse_frequencies(head_dim, theta, yarn), expected_inv_freq, atol=0, rtol=1e-6)
    assert attention_factor(yarn) == pytest.approx(expected_factor, rel=1e-12)
    table = cos_sin_cache(head_dim, 5000, theta, yarn)
    angles = torch.outer(torch.arange(5000, dtype=torch.float32), expected_inv_freq)
    torch.testing.assert_close(table, torch.cat([angles.cos(), angles.sin()], -1) * expected_factor,
                               atol=1e-5, rtol=0)
