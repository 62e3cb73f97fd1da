"""embed, classify, reward and rerank: one prefill-only pooling request per row. One module, because the four
differ only in where a row's token ids come from (its prompt, or rerank's query and document) and in which
result columns the engine's output fills; everything between (encoding, fitting, ordering, error rows) is
the same.

- embed: `embedding`, a fixed-size list of float32 (float16 with embed_dtype), `dimensions` wide if set, else
  the model's hidden size, normalized unless normalize is off.
- classify: `probs`, one per label (softmax; a one-label head's sigmoid), and the likeliest `label` (id2label).
- reward: `reward`, the head's first output: a reward model has one label.
- rerank: `score` of the row's (query, document): a reranker's yes probability, or a one-label cross-encoder's
  sigmoid. A model that can only embed is refused before the job starts (LocalExecutor.check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bulkinfer.engine.pooling.pair_prompt import pair_prompt_ids
from bulkinfer.outputs import PoolingRequestOutput
from bulkinfer.runner.bins import order_for_engine
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.prompts import (
    CHARS_PER_TOKEN,
    PromptRenderer,
    bounded,
    cut_to,
    encode_prompts,
    prompt_columns,
    text_field,
)
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.base import (
    ERROR,
    PROMPT_TOKENS,
    EngineFacts,
    Row,
    result_row,
)
from bulkinfer.runner.tasks.work import Failure, PreparedWindow, Work

if TYPE_CHECKING:
    from bulkinfer.engine.llm import LLM

EMBED_DTYPES = {"float32": pa.float32(), "float16": pa.float16()}


@dataclass
class PoolingWork(Work):
    task: str = "embed"  # the engine's pooling task (LLM.add_pooling_request)

    def send(self, llm: LLM) -> None:
        llm.add_pooling_request(self.request_id, self.token_ids, self.task, self.params)


class PoolingTask:
    """A task whose row is one pooling request of ENGINE_TASK on the row's prompt; subclasses name their columns
    (COLUMNS) and fill them from the engine's output (_values)."""

    ENGINE_TASK: str
    COLUMNS: dict[str, pa.DataType]
    TRUNCATES = True  # whether the job's truncate setting may cut an over-long prompt

    def __init__(self, config: JobConfig, engine: EngineFacts) -> None:
        self.config = config
        self.engine = engine
        self.renderer = PromptRenderer(config, engine.tokenizer)
        self.types = self.result_types(False)

    @staticmethod
    def input_columns(config: JobConfig) -> list[tuple[str, str]]:
        return prompt_columns(config)

    @classmethod
    def result_types(cls, list_outputs: bool) -> dict[str, pa.DataType]:
        return {**cls.COLUMNS, "prompt_tokens": PROMPT_TOKENS, "error": ERROR}

    def prepare(self, window: list[SourceRow]) -> PreparedWindow:
        failures: list[Failure] = []
        ready: list[tuple[SourceRow, Any]] = []
        for row in window:
            if row.error is not None:
                failures.append(Failure(row, row.error))
                continue
            try:
                ready.append((row, self._prompt(row.values or {})))
            except ValueError as exc:
                failures.append(Failure(row, f"{row.where}: {exc}"))
        work: list[PoolingWork] = []
        for (row, _), encoded in zip(ready, self._encode([prompt for _, prompt in ready])):
            fitted = self._fit(row, encoded)
            (failures if isinstance(fitted, Failure) else work).append(fitted)
        return PreparedWindow(order_for_engine(work, lambda w: w.token_ids), failures)

    def collect(self, work: Work, output: PoolingRequestOutput) -> Row:
        if output.error is not None:
            return self.failure(work.row, f"{work.row.where}: {output.error}", len(output.prompt_token_ids))
        return self._row(work.row, self._values(output.outputs), len(output.prompt_token_ids), None)

    def failure(self, row: SourceRow, error: str, prompt_tokens: int | None = None) -> Row:
        return self._row(row, dict.fromkeys(self.COLUMNS), prompt_tokens, error)

    def _row(self, row: SourceRow, columns: Row, prompt_tokens: int | None, error: str | None) -> Row:
        return result_row(row, {**columns, "prompt_tokens": prompt_tokens, "error": error})

    def _values(self, output: Any) -> Row:
        raise NotImplementedError

    def _prompt(self, values: dict[str, Any]) -> Any:
        """What the row's request is made of; ValueError with a readable reason when the row has none."""
        return bounded(self.renderer.render(values), self.engine.max_model_len, self.config.truncate)

    def _encode(self, prompts: list[Any]) -> list[list[int] | str]:
        return encode_prompts(self.engine.tokenizer, prompts, self.renderer.adds_special_tokens)

    def _fit(self, row: SourceRow, encoded: list[int] | str) -> PoolingWork | Failure:
        if isinstance(encoded, str):
            return Failure(row, f"{row.where}: the tokenizer failed on the prompt ({encoded})")
        if not encoded:
            return Failure(row, f"{row.where}: the prompt encodes to no tokens", 0)
        limit = self.engine.max_model_len
        fitted = cut_to(encoded, limit, self.config.truncate)
        if fitted is None:
            hint = " (set truncate to 'left' or 'right' to cut it)" if self.TRUNCATES else ""
            return Failure(row, f"{row.where}: prompt is {len(encoded)} tokens; it exceeds max_model_len {limit}{hint}",
                           len(encoded))
        return PoolingWork(row, fitted, self.config.pooling_params, task=self.ENGINE_TASK)


class EmbedTask(PoolingTask):
    ENGINE_TASK = "embed"
    # Every job's element type and width are its own (see types); this is what its declarations share.
    COLUMNS = {"embedding": pa.list_(pa.float32())}

    def __init__(self, config: JobConfig, engine: EngineFacts) -> None:
        super().__init__(config, engine)
        width = config.pooling_params.dimensions or engine.hidden_size
        self.element = EMBED_DTYPES[config.embed_dtype]
        self.types = {**self.types, "embedding": pa.list_(self.element, width)}

    def _values(self, output: Any) -> Row:
        # Rounded to the element type here, so a JSONL result file holds the values a Parquet one does.
        return {"embedding": pa.array(output.embedding, self.element).to_pylist()}


class ClassifyTask(PoolingTask):
    ENGINE_TASK = "classify"
    COLUMNS = {"probs": pa.list_(pa.float32()), "label": pa.string()}

    def _values(self, output: Any) -> Row:
        return {"probs": output.probs, "label": output.label}


class RewardTask(PoolingTask):
    ENGINE_TASK = "reward"
    COLUMNS = {"reward": pa.float64()}

    def _values(self, output: Any) -> Row:
        return {"reward": float(output.data[0])}  # data: the head's logits, [num_labels]


class RerankTask(PoolingTask):
    ENGINE_TASK = "score"
    COLUMNS = {"score": pa.float64()}
    TRUNCATES = False  # cutting the prompt would cut the template around the pair (JobConfig refuses it)

    @staticmethod
    def input_columns(config: JobConfig) -> list[tuple[str, str]]:
        return [("query_column", config.query_column), ("document_column", config.document_column)]

    def _prompt(self, values: dict[str, Any]) -> tuple[str, str]:
        query, document = text_field(values, self.config.query_column), text_field(values, self.config.document_column)
        limit = CHARS_PER_TOKEN * self.engine.max_model_len
        if len(query) + len(document) > limit:
            raise ValueError(f"query and document are {len(query) + len(document):,} characters; more than "
                             f"{CHARS_PER_TOKEN} x max_model_len ({limit:,}) cannot fit, so they were not tokenized")
        return query, document

    def _encode(self, prompts: list[tuple[str, str]]) -> list[list[int] | str]:
        return [self._encode_pair(query, document) for query, document in prompts]

    def _encode_pair(self, query: str, document: str) -> list[int] | str:
        try:
            return pair_prompt_ids(self.engine.tokenizer, self.engine.head, self.config.engine.rerank_template,
                                   query, document)
        except Exception as exc:  # noqa: BLE001 - the tokenizer's own errors fail only their row
            return f"{type(exc).__name__}: {exc}"

    def _values(self, output: Any) -> Row:
        return {"score": output.score}
