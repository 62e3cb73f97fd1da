"""The OpenAI Batch API file format: request lines in, response lines out.

A batch input file is turned into a plain request table (one row per line, or per input of an embeddings,
score or rerank line; rendered prompt and sampling columns) that the runner reads like any JSONL input, so a
batch job is resumable like any job; its results are turned back into OpenAI batch output lines, one per
request line, by `export_openai_batch`.
"""

from bulkinfer.openai_batch.convert import convert_batch_file, job_settings
from bulkinfer.openai_batch.export import export_openai_batch, is_batch_job

__all__ = ["convert_batch_file", "job_settings", "export_openai_batch", "is_batch_job"]
