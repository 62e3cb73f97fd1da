"""The handle that picks a LoRA adapter for one request, in vLLM's shape."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoRARequest:
    """``LoRARequest("sql", 1, "/adapters/sql")``: a PEFT adapter directory, known to the engine by its
    ``lora_int_id`` (a positive integer, one per adapter; vLLM's rule)."""

    lora_name: str
    lora_int_id: int
    lora_path: str

    def __post_init__(self) -> None:
        if not isinstance(self.lora_int_id, int) or self.lora_int_id < 1:
            raise ValueError(f"lora_int_id must be a positive integer, got {self.lora_int_id!r}")
