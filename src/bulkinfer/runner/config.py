"""Every setting of a job, in one flat dataclass whose field names are the CLI flags and job-file keys."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from bulkinfer.errors import UsageError
from bulkinfer.runner.rows import TASK_COLUMNS
from bulkinfer.sampling_params import SamplingParams

INPUT_FORMATS = ("parquet", "jsonl")
OUTPUT_FORMATS = ("parquet", "jsonl")
EXECUTORS = ("local", "ray")
TRUNCATE_SIDES = ("left", "right")
TASKS = tuple(TASK_COLUMNS)
# SamplingParams fields a job sets for every row (and that per-row columns may override).
SAMPLING_FIELDS = ("n", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "logprobs")


@dataclass
class JobConfig:
    model: str
    input: list[str]
    output: str
    input_format: str | None = None  # None: from each file's extension
    # What to send: a text column, or a column of chat messages rendered with the chat template.
    prompt_column: str = "prompt"
    messages_column: str | None = None
    system_prompt: str | None = None
    id_column: str | None = None
    # SamplingParams field -> input column whose non-null values override the job's setting per row.
    param_columns: dict[str, str] = field(default_factory=dict)
    truncate: str | None = None
    # What to do with each row: generate text, score a continuation, or pick the likeliest of its choices.
    task: str = "generate"
    context_column: str = "context"
    continuation_column: str = "continuation"
    choices_column: str = "choices"
    # Sampling. A job-level seed gives row i the seed `seed + i`, so results do not depend on batching.
    n: int = 1
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: int | None = None
    # Engine.
    dtype: str = "auto"
    device: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    num_kv_blocks: int | None = None
    block_size: int = 16
    enable_prefix_caching: bool = True
    attention_backend: str = "auto"
    kv_cache_memory_gb: float | None = None  # None here and below: the engine's default
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None
    tensor_parallel_size: int = 1
    # Output and pacing.
    output_format: str = "parquet"
    window_rows: int = 20_000
    shard_rows: int = 10_000
    commit_seconds: float = 60.0
    max_in_flight: int | None = None  # requests kept in the engine; None: 4 x max_num_seqs
    fail_on_error: bool = False
    force: bool = False
    # Scale-out (see runner/parts.py and executors/). Shard None: from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX.
    num_shards: int | None = None
    shard: int | None = None
    executor: str = "local"
    ray_address: str | None = None  # None: RAY_ADDRESS, else a new local Ray cluster
    replicas: int = 1
    gpus_per_replica: float = 0.0

    def __post_init__(self) -> None:
        self._validate()

    @classmethod
    def default_of(cls, name: str) -> Any:
        """The default of a field, for --help and for merging settings from several places."""
        spec = next(f for f in dataclasses.fields(cls) if f.name == name)
        if spec.default_factory is not dataclasses.MISSING:
            return spec.default_factory()
        return spec.default

    def sampling_params(self) -> SamplingParams:
        return SamplingParams(**{name: getattr(self, name) for name in SAMPLING_FIELDS})

    @property
    def in_flight_target(self) -> int:
        return self.max_in_flight or 4 * self.max_num_seqs

    @property
    def list_outputs(self) -> bool:
        """Generation columns hold one entry per sample when any row may have n > 1."""
        return self.n > 1 or "n" in self.param_columns

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None or "logprobs" in self.param_columns

    def _validate(self) -> None:
        if not self.input:
            raise UsageError("no input given: pass at least one --input PATH")
        _check_choice("input_format", self.input_format, INPUT_FORMATS, allow_none=True)
        _check_choice("output_format", self.output_format, OUTPUT_FORMATS)
        _check_choice("truncate", self.truncate, TRUNCATE_SIDES, allow_none=True)
        _check_choice("executor", self.executor, EXECUTORS)
        _check_choice("task", self.task, TASKS)
        if self.task != "generate" and self.executor != "local":
            raise UsageError(f"task {self.task!r} runs with the local executor only")
        for name in ("window_rows", "shard_rows", "max_num_seqs", "block_size", "replicas", "tensor_parallel_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.commit_seconds <= 0:
            raise UsageError(f"commit_seconds must be > 0, got {self.commit_seconds}")
        if self.system_prompt is not None and self.messages_column is None:
            raise UsageError("system_prompt needs messages_column: it is added to each row's chat messages")
        unknown = sorted(set(self.param_columns) - set(SAMPLING_FIELDS))
        if unknown:
            raise UsageError(f"param_columns: {', '.join(unknown)} cannot be set per row; "
                             f"these can: {', '.join(SAMPLING_FIELDS)}")
        try:
            self.sampling_params()
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad sampling setting: {exc}") from None


def _check_choice(name: str, value: str | None, choices: tuple[str, ...], allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value not in choices:
        raise UsageError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
