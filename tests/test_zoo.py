"""The zoo's checkpoints run in transformers itself, and their distinctive features change what they compute."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from test_checkpoints import _greedy
from test_invariance import random_prompts
from zoo import WINDOW, ZOO

SLIDING = [arch for arch, (_, settings) in ZOO.items() if settings.get("sliding_window") == WINDOW]


def _last_logits(path, prompt: list[int], **config) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager", **config)
    with torch.no_grad():
        return model.eval()(torch.tensor([prompt])).logits[0, -1]


@pytest.mark.parametrize("arch", list(ZOO))
def test_transformers_generates_varied_tokens(checkpoint_factory, arch):
    tokens = _greedy(checkpoint_factory(arch), "The engine reads the tokens")
    assert len(tokens) == 24 and len(set(tokens)) >= 8, tokens


@pytest.mark.parametrize("arch", SLIDING)
def test_a_30_token_prompt_crosses_the_window(checkpoint_factory, arch):
    """The window is small enough that the parity prompts see it: without it, the logits move."""
    path, prompt = checkpoint_factory(arch), random_prompts(1, 30, 31)[0]
    windowed, unwindowed = _last_logits(path, prompt), _last_logits(path, prompt, sliding_window=4096)
    assert (windowed - unwindowed).abs().max() > 1e-2
