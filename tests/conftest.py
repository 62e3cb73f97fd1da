"""Shared fixtures: tiny random Hugging Face checkpoints built once per test session."""

from __future__ import annotations

import os

import torch

# Triton decides when a kernel is defined whether to interpret it, so this must come before any
# test imports bulkinfer: without a GPU, the Triton path runs in Triton's interpreter.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The engine keeps Inductor's compiled kernels under the user's home (engine/compile_cache.py); tests keep
# them under the system's temporary folder, where later sessions find them (torch's own folder counts as unset).
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(default_cache_dir(), "bulkinfer-tests")

import json  # noqa: E402
from pathlib import Path
from typing import Any, Callable

import pytest

from checkpoints import make_checkpoint
from s3_server import s3_server  # noqa: F401 -- the S3 server fixture, for every test folder

CheckpointFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory: pytest.TempPathFactory) -> CheckpointFactory:
    """`factory(arch, **overrides) -> Path`; each distinct (arch, overrides) is built once.

    The returned directory is shared by every test in the session: treat it as read-only.
    """
    root = tmp_path_factory.mktemp("checkpoints")
    built: dict[str, Path] = {}

    def factory(arch: str, **overrides: Any) -> Path:
        # JSON, not a tuple, so dict-valued overrides such as rope_scaling can be cache keys.
        key = json.dumps([arch, overrides], sort_keys=True)
        if key not in built:
            built[key] = make_checkpoint(root / f"{arch}-{len(built)}", arch, **overrides)
        return built[key]

    return factory


@pytest.fixture(scope="session")
def tiny_llama(checkpoint_factory: CheckpointFactory) -> Path:
    """The default "llama" checkpoint: untied embeddings, 4 heads over 2 KV heads."""
    return checkpoint_factory("llama")


@pytest.fixture(scope="session")
def tiny_harmony(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gpt-oss-style checkpoint: harmony's special tokens at their real ids, gpt-oss's chat template."""
    from harmony_checkpoint import make_harmony_checkpoint

    return make_harmony_checkpoint(tmp_path_factory.mktemp("checkpoints") / "harmony")


@pytest.fixture(scope="session")
def tiny_gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random gpt-oss (transformers' GptOssConfig): sliding and full layers with sinks, YaRN, biased experts."""
    from gpt_oss_checkpoint import make_gpt_oss_checkpoint

    return make_gpt_oss_checkpoint(tmp_path_factory.mktemp("checkpoints") / "gpt_oss")
