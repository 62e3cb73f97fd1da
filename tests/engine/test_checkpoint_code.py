"""A checkpoint is data: no Python it carries runs, and a checkpoint that needs its own code or pickled
weights is refused in one line before anything is loaded or written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bulkinfer import LLM
from bulkinfer.models.config import UnsupportedModelError
from bulkinfer.models.checkpoint import ModelNotFoundError
from bulkinfer.models.refusal import refuse_tokenizer_code

# Written by the checkpoint's tokenizer module if anything ever imports it.
TOKENIZER_MODULE = """
import pathlib
pathlib.Path(__file__).with_name("code-ran").write_text("the checkpoint's code ran")
from transformers import PreTrainedTokenizerFast
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    path = tmp_path / "model"
    shutil.copytree(checkpoint, path)
    return path


def _edit_json(file: Path, **changes) -> None:
    file.write_text(json.dumps(json.loads(file.read_text()) | changes))


def _with_tokenizer_code(checkpoint: Path, tmp_path: Path, **changes) -> Path:
    path = _copy(checkpoint, tmp_path)
    (path / "tokenization_evil.py").write_text(TOKENIZER_MODULE)
    _edit_json(path / "tokenizer_config.json", **changes)
    return path


REMOTE_TOKENIZERS = {
    "auto_map and its own class": dict(tokenizer_class="EvilTokenizer",
                                       auto_map={"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}),
    "auto_map alone": dict(auto_map={"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}),
    "a class transformers lacks": dict(tokenizer_class="EvilTokenizer"),
}


def _run_cli(tmp_path: Path, model: Path, *options: str) -> subprocess.CompletedProcess:
    """`bulkinfer run` in its own process, answering "y" to any question asked on stdin."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "hello"}\n')
    command = [sys.executable, "-m", "bulkinfer", "run", "--model", str(model), "--input", str(rows),
               "--output", str(tmp_path / "out"), "--max-tokens", "2", "--device", "cpu", *options]
    return subprocess.run(command, input="y\ny\ny\n", capture_output=True, text=True, timeout=300)


def _assert_refused_in_one_line(result: subprocess.CompletedProcess, tmp_path: Path, reason: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("bulkinfer: error: "), result.stderr
    assert reason in result.stderr
    assert not (tmp_path / "out" / "job.json").exists()


def test_cli_refuses_a_tokenizer_with_its_own_code_and_runs_none_of_it(tiny_llama, tmp_path):
    model = _with_tokenizer_code(tiny_llama, tmp_path, **REMOTE_TOKENIZERS["auto_map and its own class"])
    result = _run_cli(tmp_path, model)
    _assert_refused_in_one_line(result, tmp_path, "auto_map")
    assert not (model / "code-ran").exists()


@pytest.mark.parametrize("changes", REMOTE_TOKENIZERS.values(), ids=REMOTE_TOKENIZERS)
def test_llm_refuses_a_tokenizer_with_its_own_code_and_runs_none_of_it(tiny_llama, tmp_path, changes):
    model = _with_tokenizer_code(tiny_llama, tmp_path, **changes)
    with pytest.raises(UnsupportedModelError) as info:
        LLM(str(model))
    assert "\n" not in str(info.value) and "unsupported tokenizer" in str(info.value)
    assert not (model / "code-ran").exists()


def test_auto_map_for_the_tokenizer_in_config_json_is_refused(tiny_llama, tmp_path):
    model = _with_tokenizer_code(tiny_llama, tmp_path)
    _edit_json(model / "config.json", auto_map={"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]})
    with pytest.raises(UnsupportedModelError, match="config.json's auto_map"):
        LLM(str(model))
    assert not (model / "code-ran").exists()


@pytest.mark.parametrize("name", ["LlamaTokenizerFast", "Qwen2Tokenizer", "GPT2TokenizerFast", "GemmaTokenizerFast",
                                  "PreTrainedTokenizerFast", "TokenizersBackend", "CodeLlamaTokenizerFast"])
def test_tokenizer_classes_transformers_provides_are_accepted(tmp_path, name):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": name}))
    refuse_tokenizer_code(tmp_path)


def _pickled_weights_only(checkpoint: Path, tmp_path: Path) -> Path:
    """The checkpoint with its weights in a pickle that would run code if it were ever unpickled."""
    model = _copy(checkpoint, tmp_path)
    for weights in model.glob("*.safetensors*"):
        weights.unlink()
    (model / "pytorch_model.bin").write_bytes(
        b"cos\nsystem\n(S'touch " + str(model / "code-ran").encode() + b"'\ntR.")
    return model


@pytest.mark.parametrize("model_impl", ["transformers", "native"])
def test_cli_refuses_pickled_weights_before_writing_the_job(tiny_llama, tmp_path, model_impl):
    model = _pickled_weights_only(tiny_llama, tmp_path)
    result = _run_cli(tmp_path, model, "--model-impl", model_impl)
    _assert_refused_in_one_line(result, tmp_path, "pytorch_model.bin")
    assert not (model / "code-ran").exists()


def test_llm_refuses_pickled_weights_on_the_transformers_path(tiny_llama, tmp_path):
    model = _pickled_weights_only(tiny_llama, tmp_path)
    with pytest.raises(ModelNotFoundError, match="no \\*.safetensors weights"):
        LLM(str(model), model_impl="transformers")
    assert not (model / "code-ran").exists()
