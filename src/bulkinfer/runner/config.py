"""Every setting of a job. A job's own settings are declared here; the engine's, sampling's and pooling's are
EngineConfig's, SamplingParams' and PoolingParams' fields. All of them share one flat namespace, `job_settings()`,
from which the flags, the job-file keys and stats.json are derived.

    config = JobConfig.from_settings(model="ckpt", input=["data/"], output="out", max_tokens=64)
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar

from bulkinfer.engine.config import EngineConfig
from bulkinfer.errors import UsageError
from bulkinfer.pooling_params import PoolingParams
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import Setting, check_choices, construct, expand_paths, setting, settings_of

# The registry of tasks (runner/tasks/) imports this module, so the names are declared here too; a test
# checks that the two agree.
TASK_NAMES = ("generate", "score", "choice", "embed", "classify", "reward", "rerank")
# The param column that picks a row's LoRA adapter by name (one of the job's lora adapters, or base).
LORA_PARAM, BASE_MODEL = "lora", "base"
# Settings that may hold credentials, so never written where the job's results go.
SECRET_SETTINGS = ("storage_options",)
# The tasks that pool a prompt's hidden states rather than generate or score text.
POOLING_TASK_NAMES = ("embed", "classify", "reward", "rerank")


def _job_sampling() -> SamplingParams:
    """SamplingParams with a job's defaults, where they differ from the Python API's."""
    return SamplingParams(**{s.field: s.default for s in settings_of(SamplingParams)})


@dataclass
class JobConfig:
    HELP_PANEL: ClassVar[str] = "Input"

    model: str = setting(help="Model: a local Hugging Face checkpoint directory, or a hub id.", path=True,
                         panel="Model")
    input: list[str] = setting(help="Input file, directory or glob (.parquet, .jsonl, .jsonl.gz, .jsonl.zst), "
                                    "local or on object storage (s3://, gs://, hf://datasets/...); repeat for "
                                    "more.", path=True)
    output: str = setting(help="Output directory; rerunning the same job on it resumes.", path=True,
                          panel="Output")
    # Never in the job's fingerprint, job.json, the ledger or stats.json: it may hold credentials.
    storage_options: str | dict | None = setting(
        None, "Options for the object store, as a JSON object: fsspec's keyword arguments for its filesystem, "
              "e.g. '{\"endpoint_url\": \"http://minio:9000\", \"key\": \"...\", \"secret\": \"...\"}' "
              "(default: the store's own environment and profiles). Never written to the output directory.")
    input_format: str | None = setting(None, "parquet or jsonl, for every input (default: from each file's "
                                             "extension).", choices=("parquet", "jsonl"))
    # What to send: a text column, or a column of chat messages rendered with the chat template.
    prompt_column: str = setting("prompt", "Column with the prompt text.")
    messages_column: str | None = setting(None, "Column with chat messages ({role, content} lists), rendered "
                                                "with the chat template.")
    system_prompt: str | None = setting(None, "System message added before each row's messages "
                                              "(with --messages-column); refused when the chat template would "
                                              "drop it.")
    chat_template: str | None = setting(None, "Jinja file with the chat template to render messages with, "
                                              "instead of the tokenizer's (default: the tokenizer's).", path=True,
                                        panel="Model")
    chat_template_kwargs: str | dict | None = setting(
        None, "More variables for the chat template, as a JSON object, e.g. '{\"enable_thinking\": false}' "
              "(with --messages-column; vLLM's chat_template_kwargs).", panel="Model")
    id_column: str | None = setting(None, "Column that identifies rows (default: none; row_index, the row's "
                                          "position, does).")
    param_columns: dict[str, str] = setting(help="PARAM=COLUMN: take a sampling setting (max_tokens, seed, ...) "
                                                 "from a column per row; repeatable.", factory=dict,
                                            flag="param-column")
    lora: dict[str, str] = setting(help="NAME=PATH: a LoRA adapter (a PEFT directory) that rows choose by name "
                                        "in their lora param column (--param-column lora=COLUMN); repeatable. "
                                        "See docs/lora.md.", factory=dict, path=True, panel="Model")
    truncate: str | None = setting(None, "Cut over-long prompts from the left or right instead of failing those "
                                         "rows (default: fail).", choices=("left", "right"))
    # What to do with each row: generate text, score a continuation, or pick the likeliest of its choices.
    task: str = setting("generate", "generate, score (logprob of a continuation column), choice (likeliest "
                                    "of a choices column), embed, classify, reward, or rerank (a query column "
                                    "against a document column). See docs/jobs.md.", choices=TASK_NAMES)
    context_column: str = setting("context", "Column with the context text (--task score).")
    continuation_column: str = setting("continuation", "Column with the continuation to score (--task score).")
    choices_column: str = setting("choices", "Column with a list of candidate continuations of the prompt "
                                             "(--task choice).")
    query_column: str = setting("query", "Column with the query text (--task rerank).")
    document_column: str = setting("document", "Column with the document text scored against the query "
                                               "(--task rerank).")
    embed_dtype: str = setting("float32", "Element type of the embedding column (--task embed): float32 or "
                                          "float16.", choices=("float32", "float16"), panel="Output")
    # Output and pacing.
    output_format: str = setting("parquet", "Result file format: parquet or jsonl.", choices=("parquet", "jsonl"),
                                 panel="Output")
    window_rows: int = setting(20_000, "Rows read, tokenized and sorted by length at a time.", panel="Performance")
    shard_rows: int = setting(10_000, "Rows per result file.", panel="Output")
    commit_seconds: float = setting(5.0, "Commit finished rows at least this often, in seconds: a kill loses at "
                                         "most this much work.", panel="Output")
    max_in_flight: int | None = setting(None, "Requests kept queued in the engine (default: 4 x max_num_seqs).",
                                        panel="Performance")
    fail_on_error: bool = setting(False, "Exit with status 1 when any row has an error.", panel="Output")
    force: bool = setting(False, "Discard the results of a different job in the output directory and start over.",
                          panel="Output")
    # Scale-out: shard None takes SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX (see shards.py).
    num_shards: int | None = setting(None, "Split the input into this many disjoint shards, run one per process "
                                           "(default: 1).", panel="Performance")
    shard: int | None = setting(None, "Which shard this run does, 0..N-1 (default: SLURM_ARRAY_TASK_ID or "
                                      "JOB_COMPLETION_INDEX).", panel="Performance")
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig, metadata={"group": True})
    sampling: SamplingParams = dataclasses.field(default_factory=_job_sampling, metadata={"group": True})
    pooling_params: PoolingParams = dataclasses.field(default_factory=PoolingParams, metadata={"group": True})

    def __post_init__(self) -> None:
        self._validate()

    @classmethod
    def from_settings(cls, **settings: Any) -> JobConfig:
        """A JobConfig from flat settings (as flags and job files give them); the rest keep their defaults.
        A leading ~ in a path setting is the user's home, as on the command line."""
        by_name = {s.name: s for s in job_settings()}
        settings = expand_paths(job_settings(), settings)
        unknown = sorted(set(settings) - set(by_name))
        if unknown:
            raise UsageError(f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
        groups: dict[type, dict[str, Any]] = {cls: {}, EngineConfig: {}, SamplingParams: {}, PoolingParams: {}}
        for name, value in settings.items():
            groups[by_name[name].owner][by_name[name].field] = value
        try:
            engine = construct(EngineConfig, groups[EngineConfig], "engine option")
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad engine setting: {exc}") from None
        try:
            sampling = dataclasses.replace(_job_sampling(), **groups[SamplingParams])
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad sampling setting: {exc}") from None
        try:
            pooling_params = PoolingParams(**groups[PoolingParams])
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad pooling setting: {exc}") from None
        missing = [f"--{name}" for name in ("model", "input", "output") if name not in groups[cls]]
        if missing:
            raise UsageError(f"missing {', '.join(missing)}")
        return cls(**groups[cls], engine=engine, sampling=sampling, pooling_params=pooling_params)

    def settings(self) -> dict[str, Any]:
        """Every setting by its flat name, as a job file would spell it."""
        owners = {JobConfig: self, EngineConfig: self.engine, SamplingParams: self.sampling,
                  PoolingParams: self.pooling_params}
        return {s.name: getattr(owners[s.owner], s.field) for s in job_settings()}

    @property
    def in_flight_target(self) -> int:
        return self.max_in_flight or 4 * self.engine.max_num_seqs

    @property
    def list_outputs(self) -> bool:
        """Generation columns hold one entry per sample when any row may have n > 1."""
        return self.sampling.n > 1 or "n" in self.param_columns

    def wants(self, option: str) -> bool:
        """Whether some row may ask for `option` (logprobs, prompt_logprobs): set for the job or per row."""
        return getattr(self.sampling, option) is not None or option in self.param_columns

    @property
    def json_outputs(self) -> bool:
        """Whether some row's output must be JSON: it then gets a generated_json column."""
        return (self.sampling.json is not None or self.sampling.json_object
                or bool({"json_schema", "json_object"} & set(self.param_columns)))

    @property
    def tool_outputs(self) -> bool:
        """Whether some row may carry tools: it then gets a tool_calls column."""
        return self.sampling.tools is not None or "tools" in self.param_columns

    def _validate(self) -> None:
        if not self.input:
            raise UsageError("no input given: pass at least one --input PATH")
        try:
            check_choices(self)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        for name in ("window_rows", "shard_rows"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.commit_seconds <= 0:
            raise UsageError(f"commit_seconds must be > 0, got {self.commit_seconds}")
        self.chat_template_kwargs = json_object("chat_template_kwargs", self.chat_template_kwargs)
        self.storage_options = json_object("storage_options", self.storage_options)
        for name in ("system_prompt", "chat_template", "chat_template_kwargs"):
            if getattr(self, name) is not None and self.messages_column is None:
                raise UsageError(f"{name} needs messages_column: it applies to each row's chat messages")
        if self.task == "rerank" and self.truncate is not None:
            raise UsageError("truncate does not apply to task rerank: cutting a query and document prompt would "
                             "cut its template; such rows fail instead")
        if self.chat_template is not None and not os.path.isfile(self.chat_template):
            raise UsageError(f"chat_template {self.chat_template}: no such file")
        per_row = [s.name for s in settings_of(SamplingParams) if s.per_row] + [LORA_PARAM]
        unknown = sorted(set(self.param_columns) - set(per_row))
        if unknown:
            raise UsageError(f"param_columns: {', '.join(unknown)} cannot be set per row; "
                             f"these can: {', '.join(per_row)}")
        self._validate_lora()

    def _validate_lora(self) -> None:
        """Adapters need a column that chooses them, and the engine's LoRA slots."""
        if not self.lora and LORA_PARAM not in self.param_columns:
            return
        if not self.lora:
            raise UsageError("the lora param column names adapters: give them with --lora NAME=PATH")
        if LORA_PARAM not in self.param_columns:
            raise UsageError("--lora adapters are chosen per row: add --param-column lora=COLUMN (a column naming "
                             f"an adapter, or {BASE_MODEL} for the base model)")
        if self.task in POOLING_TASK_NAMES:
            raise UsageError(f"task {self.task} takes no LoRA adapters; generate, score and choice do")
        if BASE_MODEL in self.lora:
            raise UsageError(f"lora: {BASE_MODEL!r} means the base model; give the adapter another name")
        self.lora = {name: os.path.expanduser(path) for name, path in self.lora.items()}
        try:
            self.engine = dataclasses.replace(self.engine, enable_lora=True)
        except ValueError as exc:
            raise UsageError(f"bad engine setting: {exc}") from None


def json_object(name: str, value: str | dict | None) -> dict | None:
    """A setting that is a JSON object, from the object or its text (as a flag gives it)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{name} is not valid JSON ({exc})") from None
    if value is not None and not isinstance(value, dict):
        raise UsageError(f"{name} must be a JSON object, got {json.dumps(value)}")
    return value


def job_settings() -> list[Setting]:
    """The flat namespace: the job's own settings, then sampling's (job defaults), pooling's, then the engine's."""
    found = [*settings_of(JobConfig), *settings_of(SamplingParams), *settings_of(PoolingParams),
             *settings_of(EngineConfig)]
    names = [s.name for s in found]
    clashes = {name for name in names if names.count(name) > 1}
    assert not clashes, f"settings declared under one name twice: {clashes}"  # a declaration mistake, not a user's
    return found
