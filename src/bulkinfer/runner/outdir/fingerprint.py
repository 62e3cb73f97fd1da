"""What makes a job this job: its inputs, model and every setting that changes a result.

Stored in OUT/job.json at the start; a rerun on the same directory continues only when its
fingerprint is equal, so a resumed output never mixes results of two different jobs. Settings that
only change speed (batch sizes, window sizes) are left out, so they can be tuned between runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from bulkinfer.engine.tokenizer import tokenizer_path
from bulkinfer.errors import UsageError
from bulkinfer.models.checkpoint import ModelNotFoundError, resolve_model_path
from bulkinfer.runner.config import POOLING_TASK_NAMES, JobConfig
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import settings_of

_SAMPLING_DEFAULTS = {s.field: s.default for s in settings_of(SamplingParams)}
PROMPT_FIELDS = ("prompt_column", "messages_column", "system_prompt", "id_column", "param_columns", "truncate")
TASK_FIELDS = ("task", "context_column", "continuation_column", "choices_column")
POOLING_FIELDS = ("query_column", "document_column", "embed_dtype")
POOLING_ENGINE_FIELDS = ("pooling", "classifier_from_token", "rerank_template")
_SHOWN_CHARS = 60


def job_fingerprint(config: JobConfig, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """`inputs`: each file's identity (see sources.identity_of)."""
    return {
        "inputs": inputs,
        **model_identity(config.model, config.engine.revision, config.engine.tokenizer),
        # Only when set, so jobs started before these settings existed still resume.
        **({"revision": config.engine.revision} if config.engine.revision else {}),
        **({"chat_template": _hash(Path(config.chat_template))} if config.chat_template else {}),
        **({"chat_template_kwargs": config.chat_template_kwargs} if config.chat_template_kwargs is not None else {}),
        **({"tool_call_parser": config.engine.tool_call_parser} if config.engine.tool_call_parser != "auto" else {}),
        "dtype": config.engine.dtype,
        "max_model_len": config.engine.max_model_len,
        **{name: getattr(config, name) for name in PROMPT_FIELDS},
        **dataclasses.asdict(config.sampling),
        # Only for scoring tasks, so generation jobs started before tasks existed still resume.
        **({name: getattr(config, name) for name in TASK_FIELDS} if config.task != "generate" else {}),
        # Only for pooling tasks, for the same reason.
        **(_pooling_fields(config) if config.task in POOLING_TASK_NAMES else {}),
        # Only when on, for the same reason: a batch-invariant job must not resume without it.
        **({"deterministic": True} if config.engine.deterministic else {}),
        # Only when not auto, for the same reason: it decides what generated_text holds.
        **({"reasoning_parser": config.engine.reasoning_parser} if config.engine.reasoning_parser != "auto" else {}),
        # Only when set, for the same reason: each adapter by name, its directory and its files' hashes.
        **({"lora": {name: _adapter_identity(Path(path)) for name, path in sorted(config.lora.items())}}
           if config.lora else {}),
    }


def _adapter_identity(path: Path) -> dict[str, Any]:
    """An adapter is small: every file of it is hashed, its weights too."""
    path = path.resolve()
    files = {file.name: _hash(file) for file in sorted(path.iterdir()) if file.suffix in (".json", ".safetensors")} \
        if path.is_dir() else {}
    return {"path": str(path), "files": files}


def _pooling_fields(config: JobConfig) -> dict[str, Any]:
    return {**{name: getattr(config, name) for name in POOLING_FIELDS}, **dataclasses.asdict(config.pooling_params),
            **{name: getattr(config.engine, name) for name in POOLING_ENGINE_FIELDS}}


def model_identity(model: str, revision: str | None = None, tokenizer: str | None = None) -> dict[str, Any]:
    """The checkpoint's directory, hashes of its small text files (config, tokenizer, chat template:
    transformers keeps that in chat_template.jinja or tokenizer_config.json) and its weight sizes; and
    the same of a tokenizer given apart from the model."""
    try:
        path = resolve_model_path(model, revision).resolve()
        tokenizer_dir = tokenizer_path(path, tokenizer).resolve()
    except ModelNotFoundError as exc:
        raise UsageError(str(exc)) from None
    identity: dict[str, Any] = {"model": str(path), "model_files": _file_identities(path)}
    if tokenizer_dir != path:
        identity.update(tokenizer=str(tokenizer_dir), tokenizer_files=_file_identities(tokenizer_dir))
    return identity


def _file_identities(path: Path) -> dict[str, str | int]:
    files: dict[str, str | int] = {}
    for file in sorted(path.iterdir()):
        if file.suffix in (".json", ".jinja"):
            files[file.name] = _hash(file)
        elif file.suffix == ".safetensors":
            files[file.name] = file.stat().st_size  # hashing gigabytes would delay every start
    return files


def _hash(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()[:16]


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One readable phrase per setting that differs."""
    found = _input_differences(old.get("inputs", []), new.get("inputs", []))
    for key in sorted((set(old) | set(new)) - {"inputs"}):
        # A sampling option a stored fingerprint lacks did not exist when it was written: its default held.
        was = old.get(key, _SAMPLING_DEFAULTS.get(key))
        if was != new.get(key):
            found.append(f"{key} {_shown(was)} -> {_shown(new.get(key))}")
    return found


def _input_differences(old: list[dict], new: list[dict]) -> list[str]:
    old_by_path = {item["path"]: item for item in old}
    new_by_path = {item["path"]: item for item in new}
    found = [f"input {path} removed" for path in old_by_path if path not in new_by_path]
    found += [f"input {path} added" for path in new_by_path if path not in old_by_path]
    for path in old_by_path.keys() & new_by_path.keys():
        changed = [key for key in ("format", "size", "mtime_ns", "version")
                   if old_by_path[path].get(key) != new_by_path[path].get(key)]
        if changed:
            found.append(f"input {path} changed ({', '.join(changed)})")
    if not found and [item["path"] for item in old] != [item["path"] for item in new]:
        found.append("inputs given in a different order")
    return found


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
