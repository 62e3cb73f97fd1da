"""`bulkinfer inspect --model` says what the model will take: its weight format and bytes, the KV bytes per token."""

from __future__ import annotations

import json
import shutil

from safetensors.torch import load_file

from bulkinfer import LLM
from cli_helpers import REPO, invoke, one_line_error
from quantized_checkpoints import gptq_config, gptq_quantizer, write_by_layout

DATA = REPO / "examples" / "data"


def test_a_gptq_model_shows_its_format_weight_bytes_and_kv_bytes(capsys, checkpoint_factory, tmp_path):
    path, _ = write_by_layout(checkpoint_factory("llama"), tmp_path / "gptq", gptq_config(4, 32, True, True),
                              gptq_quantizer(4, 32, True, True))
    code, out, err = invoke(capsys, "inspect", DATA / "overnight.parquet", "--prompt-column", "text", "--model", path,
                            "--dtype", "float32")
    assert code == 0, err
    stored = sum(t.numel() * t.element_size() for t in load_file(path / "model.safetensors").values())
    assert f"gptq: int4 weight-only, groups of 32, act-order, {stored / 1024:.1f} KiB" in " ".join(out.split())
    # 2 layers x 2 KV heads x 16 dims, keys and values, float32
    assert "float32, 512 bytes per token" in out


def test_a_refused_model_is_one_line(capsys, tiny_llama, tmp_path):
    path = tmp_path / "model"
    shutil.copytree(tiny_llama, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | {"quantization_config": {"quant_method": "hqq"}}))
    result = invoke(capsys, "inspect", DATA / "overnight.parquet", "--prompt-column", "text", "--model", path)
    assert "quantization method 'hqq' is not supported" in one_line_error(*result[::2])


def test_multi_head_latent_attention_shows_the_bytes_its_cache_holds(capsys, checkpoint_factory):
    """DeepSeek-V2 natively caches a latent row per token and layer (latent 32 + rotary key 8); through
    transformers, keys of 24 (16 + 8 rotary) and values of 12, both held at 24."""
    path = checkpoint_factory("deepseek_v2", first_k_dense_replace=2)
    for impl, expected in [("auto", 320), ("transformers", 1536)]:  # 2 layers x 40; 2 layers x 4 heads x 24 x 2
        code, out, err = invoke(capsys, "inspect", DATA / "overnight.parquet", "--prompt-column", "text",
                                "--model", path, "--model-impl", impl, "--dtype", "float32")
        assert code == 0, err
        assert f"float32, {expected:,} bytes per token" in out
        assert LLM(str(path), dtype="float32", num_kv_blocks=8, model_impl=impl).runner.kv_bytes_per_token == expected  # the pool's
