"""`bulkinfer run --executor ray`: a job's rows done by a pool of engine replicas on a Ray cluster.

The driver (this process) keeps everything that makes a job crash-safe: the lock, job.json, the
done-set and the ledger. Ray Data carries blocks of row positions still to do to an actor pool of
replicas; each replica reads its block from the input files, runs it and sends the finished rows
back (or its refusal of the job, as when the job's adapters do not fit the model); the driver
commits them as result files and ledger lines exactly as a local run does. So a Ray job resumes
like a local one (rows of a block that was lost are simply done again) and export reads it.
"""

from __future__ import annotations

import pickle
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator

import pyarrow as pa

from bulkinfer.errors import UsageError
from bulkinfer.integrations.ray import RAY_INSTALL_HINT, LLMProcessor
from bulkinfer.runner.adapters import check_adapter_files
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.loop import Reporter
from bulkinfer.runner.open_job import OpenJob
from bulkinfer.runner.readers import InputFile, read_rows
from bulkinfer.runner.rowset import RowSet, decode_rows, encode_rows
from bulkinfer.runner.tasks import reserved_columns
from bulkinfer.settings import setting

# Finished rows travel to the driver pickled, one per cell, so their values reach the result writer
# exactly as a local run's do (a block-wise Arrow conversion could change a mixed-type column).
PAYLOAD = "row"


@dataclass(frozen=True)
class RaySettings:
    HELP_PANEL: ClassVar[str] = "Performance"

    ray_address: str | None = setting(None, "Ray cluster to join (default: RAY_ADDRESS, else start a local one).")
    replicas: int = setting(1, "Engine replicas in the Ray actor pool (with --executor ray).")
    gpus_per_replica: float = setting(0.0, "GPUs each Ray engine replica takes (0: CPU).")

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise UsageError(f"replicas must be >= 1, got {self.replicas}")


class RayExecutor:
    """A runner Executor (see runner/job.py); Ray's own progress output stands for the reporter."""

    def __init__(self, settings: RaySettings = RaySettings()) -> None:
        self.settings = settings

    def check(self, config: JobConfig) -> None:
        if config.task != "generate":
            raise UsageError(f"task {config.task!r} runs with the local executor only")
        check_adapter_files(config)  # as the local executor does: before job.json; the fit, in each replica
        _import_ray()

    def __call__(self, config: JobConfig, job: OpenJob, stop_requested: Callable[[], bool],
                 reporter: Reporter | None = None) -> None:
        ray = _import_ray()
        connects_here = not ray.is_initialized()  # else the caller has joined a cluster and keeps it
        if connects_here:
            _init(ray, self.settings.ray_address)
        try:
            _drive(ray, config, self.settings, job, stop_requested)
        finally:
            if connects_here:
                ray.shutdown()


def _drive(ray: Any, config: JobConfig, settings: RaySettings, job: OpenJob,
           stop_requested: Callable[[], bool]) -> None:
    blocks = ray.data.from_items(_blocks_to_do(job, config.window_rows))
    replica = {"config": config, "files": [file.to_json() for file in job.files]}
    finished = blocks.map_batches(BlockProcessor, fn_constructor_kwargs=replica, batch_size=1,
                                  compute=ray.data.ActorPoolStrategy(size=settings.replicas),
                                  num_gpus=settings.gpus_per_replica, batch_format="pyarrow")
    committer = job.committer(config)
    try:
        for batch in finished.iter_batches(batch_size=None, batch_format="pyarrow"):
            for payload in batch.column(PAYLOAD).to_pylist():
                row = pickle.loads(payload)
                if isinstance(row, UsageError):
                    raise row
                committer.add(row)
            committer.commit_if_due()
            if stop_requested():
                return
    finally:
        committer.commit()


def _blocks_to_do(job: OpenJob, size: int) -> list[dict[str, Any]]:
    """Blocks of `size` positions of this run's rows, each with those of its rows already done."""
    blocks = []
    for start in range(job.rows.start, job.rows.stop, size):
        stop = min(start + size, job.rows.stop)
        if not job.done.contains_all(start, stop):
            done = encode_rows(row for row in range(start, stop) if row in job.done)
            blocks.append({"start": start, "stop": stop, "done": done})
    return blocks


class BlockProcessor(LLMProcessor):
    """A replica that takes blocks of row positions, reads them from the job's inputs and runs them."""

    def __init__(self, config: JobConfig, files: list[dict[str, Any]]) -> None:
        self.refusal: UsageError | None = None
        try:
            self._load(config)
        except UsageError as exc:  # adapters that do not fit the model: sent to the driver, to say in one line
            self.refusal = exc  # (raised here, it would kill the actor and reach the driver as a traceback)
        self.files = [InputFile(**file, storage_options=config.storage_options) for file in files]

    def __call__(self, blocks: pa.Table) -> Iterator[pa.Table]:
        if self.refusal is not None:
            yield pa.table({PAYLOAD: pa.array([pickle.dumps(self.refusal)], pa.binary())})
            return
        for block in blocks.to_pylist():
            done = RowSet(decode_rows(block["done"]))
            rows = list(read_rows(self.files, done, self.config.window_rows, range(block["start"], block["stop"]),
                                  reserved=reserved_columns(self.config.task)))
            results = [pickle.dumps(row) for row in self.process(rows)]
            yield pa.table({PAYLOAD: pa.array(results, pa.binary())})


def _init(ray: Any, address: str | None) -> None:
    """Join the cluster at `address` (None: RAY_ADDRESS if set, else start a local one)."""
    on_sigterm = signal.getsignal(signal.SIGTERM)
    ray.init(address=address)
    if threading.current_thread() is threading.main_thread():
        # ray.init puts in a SIGTERM handler that exits at once; the job's own stops cleanly.
        signal.signal(signal.SIGTERM, on_sigterm)


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401 -- the data extra, not just the core
    except ImportError:
        raise UsageError(RAY_INSTALL_HINT) from None
    return ray
