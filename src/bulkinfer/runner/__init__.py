"""Crash-safe bulk jobs: stream a dataset through the engine into checkpointed result files.

    config = JobConfig.from_settings(model="path/to/checkpoint", input=["data/*.parquet"], output="out",
                                     max_tokens=64)
    outcome = run_job(config)        # or resume: the same call on the same output directory
    export_job(Path("out"), Path("results.parquet"))

A row's path: readers.py reads it, its task (tasks/generate.py, ...) makes its engine requests, loop.py
runs them through the engine, the task builds its result row, outdir/commit.py commits it; status.py
and export.py read it back.
"""

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import ExportResult, export_job
from bulkinfer.runner.job import JobOutcome, run_job
from bulkinfer.runner.status import JobStatus, job_status

__all__ = ["JobConfig", "UsageError", "run_job", "JobOutcome", "export_job", "ExportResult", "job_status",
           "JobStatus"]
