"""The `run` command's options, one per JobConfig field, built from that dataclass.

Flags are spelled like the fields (`max_tokens` -> `--max-tokens`), default to "not given" (None),
and show JobConfig's default in --help; so settings from several places (flags over a job file over
the defaults) merge by simply dropping the options that were not given.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Optional

import typer

from bulkinfer.runner.config import JobConfig
from bulkinfer.errors import UsageError

HELP = {
    "model": "Model: a local Hugging Face checkpoint directory, or a hub id.",
    "input": "Input file, directory or glob (.parquet, .jsonl, .jsonl.gz, .jsonl.zst); repeat for more.",
    "output": "Output directory; rerunning the same job on it resumes.",
    "input_format": "parquet or jsonl, for every input (default: from each file's extension).",
    "prompt_column": "Column with the prompt text.",
    "messages_column": "Column with chat messages ({role, content} lists), rendered with the chat template.",
    "system_prompt": "System message added before each row's messages (with --messages-column).",
    "id_column": "Column that identifies rows (default: none; row_index, the row's position, does).",
    "param_columns": "PARAM=COLUMN: take a sampling setting (max_tokens, seed, ...) from a column per row; repeatable.",
    "truncate": "Cut over-long prompts from the left or right instead of failing those rows (default: fail).",
    "task": "generate, score (logprob of a continuation column) or choice (likeliest of a choices column).",
    "context_column": "Column with the context text (--task score).",
    "continuation_column": "Column with the continuation text to score (--task score).",
    "choices_column": "Column with a list of candidate continuations of the prompt (--task choice).",
    "n": "Samples per row; above 1 the generation columns hold lists.",
    "max_tokens": "Most tokens to generate per sample.",
    "temperature": "Sampling temperature; 0 is greedy.",
    "top_p": "Nucleus sampling threshold.",
    "top_k": "Sample from the k most likely tokens; -1 is off.",
    "min_p": "Drop tokens less likely than min_p times the most likely one.",
    "seed": "Seed; row i uses seed + i, so results do not depend on batching (default: unseeded).",
    "stop": "Stop string; repeatable.",
    "logprobs": "Record the logprobs of each generated token and this many alternatives (default: off).",
    "dtype": "Weights and activations: auto, float32, float16 or bfloat16.",
    "device": "auto, cpu or cuda[:N).",
    "max_model_len": "Longest prompt + output in tokens (default: the model's).",
    "max_num_seqs": "Most sequences in the engine's running batch.",
    "max_num_batched_tokens": "Most tokens per engine step (default: the engine's).",
    "num_kv_blocks": "KV-cache blocks (default: sized from memory).",
    "block_size": "Tokens per KV-cache block.",
    "enable_prefix_caching": "Reuse the KV cache of shared prompt prefixes.",
    "attention_backend": "auto, triton or torch.",
    "kv_cache_memory_gb": "KV-cache size on the CPU, in GB (default: the engine's).",
    "gpu_memory_utilization": "Share of GPU memory the model and KV cache may use (default: the engine's).",
    "enforce_eager": "Run without CUDA graphs (default: the engine's).",
    "tensor_parallel_size": "Split the model's heads and MLP columns across this many processes (one GPU each).",
    "output_format": "Shard format: parquet or jsonl.",
    "window_rows": "Rows read, tokenized and sorted by length at a time.",
    "shard_rows": "Rows per result shard.",
    "commit_seconds": "Commit finished rows at least this often, in seconds.",
    "max_in_flight": "Requests kept queued in the engine (default: 4 x max_num_seqs).",
    "fail_on_error": "Exit with status 1 when any row has an error.",
    "force": "Discard the results of a different job in the output directory and start over.",
    "num_shards": "Split the input into this many disjoint shards, run one per process (default: 1).",
    "shard": "Which shard this run does, 0..N-1 (default: SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX).",
    "executor": "local (this process) or ray (an actor pool of engine replicas on a Ray cluster).",
    "ray_address": "Ray cluster to join (default: RAY_ADDRESS, else start a local one).",
    "replicas": "Engine replicas in the Ray actor pool.",
    "gpus_per_replica": "GPUs each Ray engine replica takes (0: CPU).",
}
FLAG_NAMES = {"param_columns": "--param-column", "enable_prefix_caching": "--prefix-caching/--no-prefix-caching"}


def run_parameters() -> list[inspect.Parameter]:
    hints = typing.get_type_hints(JobConfig)
    return [inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=_option(field.name),
                              annotation=_cli_type(hints[field.name]))
            for field in dataclasses.fields(JobConfig)]


def config_from_options(options: dict[str, Any]) -> JobConfig:
    """A JobConfig from the options that were given; the rest keep JobConfig's defaults."""
    given = {name: value for name, value in options.items() if value not in (None, [])}
    if "param_columns" in given:
        given["param_columns"] = _parse_pairs(given["param_columns"])
    missing = [f"--{name}" for name in ("model", "input", "output") if name not in given]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}")
    return JobConfig(**given)


def _option(name: str) -> Any:
    # The default goes into the help text: typer would show a default only for a real one, and the
    # option's real default must be None to tell "not given" apart.
    default = JobConfig.default_of(name)
    help_text = HELP[name]
    if default is dataclasses.MISSING:
        help_text += " (required: here or in the job file)"
    elif default not in (None, [], {}) and "(default:" not in help_text:
        help_text += f" (default: {str(default).lower() if isinstance(default, bool) else default})"
    flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
    return typer.Option(None, flag, help=help_text, show_default=False)


def _cli_type(hint: Any) -> Any:
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (list, dict):
        return Optional[list[str]]
    return Optional[args[0] if args else hint]


def _parse_pairs(pairs: list[str]) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        param, sep, column = pair.partition("=")
        if not sep or not param or not column:
            raise UsageError(f"--param-column {pair!r}: expected PARAM=COLUMN, e.g. max_tokens=budget")
        parsed[param.strip()] = column.strip()
    return parsed
