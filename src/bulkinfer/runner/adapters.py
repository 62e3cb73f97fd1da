"""A job's LoRA adapters: the ones it names (``lora = {NAME = PATH}``) and which of them each row chooses
in its lora param column: an adapter's name, or the base model as ``base``, null, or the model's own name
(as given, its directory's name or its full path; an OpenAI batch line's body.model names it so)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.errors import UsageError
from bulkinfer.runner.config import BASE_MODEL, LORA_PARAM, JobConfig

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM


def job_adapters(config: JobConfig) -> dict[str, LoRARequest]:
    """The job's adapters by name, each with the same id on every run (ids follow the names' order)."""
    return {name: LoRARequest(name, index, config.lora[name]) for index, name in enumerate(sorted(config.lora), 1)}


def check_adapter_files(config: JobConfig) -> None:
    """UsageError for an adapter that cannot be read or that bulkinfer does not run, before the model loads."""
    # torch comes with it: only a run that computes pays for it
    from bulkinfer.models.lora.adapter import AdapterError, load_adapter

    for name, path in config.lora.items():
        try:
            load_adapter(path, config.engine.max_lora_rank)
        except AdapterError as exc:
            raise UsageError(f"--lora {name}: {exc}") from None


def check_adapters_fit(llm: LLM, config: JobConfig) -> None:
    """UsageError for an adapter whose projections do not fit the model, once the model has loaded."""
    for name, lora in job_adapters(config).items():
        refusal = llm.loras.refusal(lora)
        if refusal:
            raise UsageError(f"--lora {name}: {refusal}")


class RowAdapters:
    """Each row's adapter (None: the base model)."""

    def __init__(self, config: JobConfig) -> None:
        self.column = config.param_columns.get(LORA_PARAM)
        self.adapters = job_adapters(config)
        model = Path(config.model).expanduser()
        self.base_names = {BASE_MODEL, config.model, model.name, str(model.resolve())}

    def for_row(self, values: dict[str, Any]) -> LoRARequest | None:
        """Raises ValueError, the row's error, when the row names no adapter of the job."""
        name = None if self.column is None else values.get(self.column)
        if name is None or name in self.base_names:
            return None
        if name not in self.adapters:
            known = ", ".join([BASE_MODEL, *self.adapters])
            raise ValueError(f"column {self.column!r} ({LORA_PARAM}): {name!r} is neither the model nor one of the "
                             f"job's adapters ({known})")
        return self.adapters[name]
