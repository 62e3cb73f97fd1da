"""Engine replicas for Ray Data: a callable class to hand to `ds.map_batches`.

    import ray
    from bulkinfer.integrations.ray import LLMProcessor

    ds = ray.data.read_parquet("s3://bucket/prompts/")
    ds = ds.map_batches(LLMProcessor, fn_constructor_kwargs={"model": "path/to/checkpoint", "max_tokens": 64},
                        concurrency=4, num_gpus=1, batch_size=256, batch_format="pyarrow")
    ds.write_parquet("s3://bucket/results/")

Each actor loads the model once; each batch comes back with its input columns and the runner's
result columns (generated_text, finish_reason, prompt_tokens, completion_tokens, error), one row per
input row, and a row that cannot run gets an `error` instead of failing the pipeline. The settings are
JobConfig's (prompt_column, messages_column, sampling, engine). `bulkinfer run --executor ray` uses
the same class under a crash-safe output directory (see ray_job.py).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from bulkinfer.runner.adapters import check_adapters_fit
from bulkinfer.runner.columns import ROW_INDEX
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.job import engine_facts, load_llm
from bulkinfer.runner.outdir.row_tables import rows_to_table
from bulkinfer.runner.readers import SourceRow
from bulkinfer.runner.tasks.generate import GenerateTask

RAY_INSTALL_HINT = "Ray is not installed; install it with: pip install 'bulkinfer[ray]'"
# JobConfig needs an input and an output; a processor has neither, its pipeline reads and writes.
_NO_FILES = dict(input=["<ray.data>"], output="<ray.data>")


class LLMProcessor:
    """One engine replica. Rows are keyed by their `row_index` column when the batch has one."""

    def __init__(self, model: str, **settings: Any) -> None:
        self._load(JobConfig.from_settings(model=model, **_NO_FILES, **settings))

    def _load(self, config: JobConfig) -> None:
        self.config = config
        self.llm = load_llm(self.config)
        check_adapters_fit(self.llm, self.config)
        self.task = GenerateTask(self.config, engine_facts(self.llm))
        self._next_index = 0  # numbers rows of batches without a row_index column

    def __call__(self, batch: pa.Table) -> pa.Table:
        return rows_to_table(self.process(self._source_rows(batch)))

    def process(self, rows: list[SourceRow]) -> list[dict[str, Any]]:
        """An output row for every input row: generated, or with the error that stopped it."""
        prepared = self.task.prepare(rows)
        done = [self.task.failure(failure.row, failure.error, failure.prompt_tokens)
                for failure in prepared.failures]
        in_flight = {}
        for work in prepared.work:
            work.send(self.llm)
            in_flight[work.request_id] = work
        while self.llm.has_unfinished_requests():
            done.extend(self.task.collect(in_flight.pop(output.request_id), output) for output in self.llm.step())
        return done

    def _source_rows(self, batch: pa.Table) -> list[SourceRow]:
        values = batch.to_pylist()
        if ROW_INDEX in batch.column_names:
            indexes = [row.pop(ROW_INDEX) for row in values]
        else:
            indexes = list(range(self._next_index, self._next_index + len(values)))
            self._next_index += len(values)
        return [SourceRow(index, row, f"row {index}") for index, row in zip(indexes, values)]
