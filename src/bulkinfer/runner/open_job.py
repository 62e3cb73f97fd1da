"""Everything a run does before the model loads: check the inputs and columns, take the output
directory, decide between a new job and resuming the one there, and repair what was damaged.

Repair never edits the ledger: a committed file that is missing, cut short or altered gets a void
record, is deleted, and its rows are done again by this run; a damaged job record is appended again
from its trusted copy; damaged lines are reported once, then recorded as reported.
"""

from __future__ import annotations

import glob
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from bulkinfer.errors import RunError, UsageError, disk_error
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.outdir.commit import Committer
from bulkinfer.runner.outdir.fingerprint import differences, job_fingerprint
from bulkinfer.runner.outdir.layout import JobDir, new_manifest
from bulkinfer.runner.outdir.ledger import JobProgress, Ledger, LedgerCorruptError, Void, job_id
from bulkinfer.runner.outdir.lock import JobLock
from bulkinfer.runner.outdir.remote_layout import RemoteJobDir
from bulkinfer.runner.outdir.remote_ledger import RemoteLedger
from bulkinfer.runner.outdir.store_errors import store_errors
from bulkinfer.runner.readers import InputFile, Source, check_unchanged, input_types
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.shards import shard_of
from bulkinfer.runner.sources import check_columns, identity_of, resolve_sources, scan_inputs
from bulkinfer.runner.storage import is_remote
from bulkinfer.runner.tasks import result_types

logger = logging.getLogger(__name__)


@dataclass
class OpenJob:
    """A job whose directory this process holds; close() releases it."""

    directory: JobDir
    files: list[InputFile]
    rows: range  # the row positions this run does: all of them, or its shard's block
    done: RowSet
    progress: JobProgress
    ledger: Ledger | RemoteLedger
    lock: JobLock | None  # None on object storage, where runs may overlap (remote_ledger)

    @property
    def rows_total(self) -> int:
        return len(self.rows)

    def committer(self, config: JobConfig, types: dict[str, pa.DataType] | None = None) -> Committer:
        """`types`: the result columns' exact types (the task's `types`), where they depend on the engine."""
        types = types or result_types(config.task, config.list_outputs)
        files = self.directory.results(config.output_format, input_types(self.files), types)
        return Committer(files, self.ledger, self.progress, self.done, config.shard_rows, config.commit_seconds,
                         self.check_before_commit)

    def check_before_commit(self) -> None:
        """Rows may be committed only by the owner of the directory, and only if read from the inputs the
        job recorded: a file changed meanwhile may have given rows that are not the job's."""
        self.check_owner()
        check_unchanged(self.files)

    def check_owner(self) -> None:
        """Raises RunError when another run may be writing here: our lock file or ledger was replaced
        or written by someone else (a deleted .lock lets a second run in). On object storage no run owns
        the job: each commit is a conditional create (remote_ledger)."""
        if self.lock is not None and (not self.lock.held() or not self.ledger.written_only_by_us()):
            raise RunError(f"{self.directory.root}: its lock file was deleted or replaced, or another process "
                           f"wrote its ledger, while this run held it; this run stops without committing more "
                           f"(nothing committed is lost). Let the other run finish, then rerun to go on")

    def close(self) -> None:
        self.ledger.close()
        if self.lock is not None:
            self.lock.release()


def open_job(config: JobConfig) -> OpenJob:
    sources = resolve_sources(config.input, config.input_format, config.storage_options)
    _check_output_outside_inputs(config, sources)
    check_columns(sources, config)
    if is_remote(config.output):
        return _open_remote(config, sources)
    directory = JobDir(Path(config.output), shard_of(config))
    directory.create_root()
    directory.check_free()
    _check_ours_alone(directory)
    lock = JobLock(directory.lock_path)
    lock.acquire()
    try:
        return _take(directory, config, sources, lock)
    except OSError as exc:
        raise disk_error(exc, str(directory.root)) from None
    except LedgerCorruptError as exc:
        raise RunError(f"{exc}; two runs wrote here at once. Export what is sound with --partial, or "
                       f"start over with --force") from None
    except BaseException:
        lock.release()
        raise


def _open_remote(config: JobConfig, sources: list[Source]) -> OpenJob:
    """A job on object storage: no lock to take, nothing local to check; the store's failures are one line."""
    directory = RemoteJobDir(config.output, config.storage_options, shard_of(config))
    with store_errors(directory.root):
        directory.check_free()
        _check_ours_alone(directory)
        return _take(directory, config, sources, None)


def _take(directory: JobDir, config: JobConfig, sources: list[Source], lock: JobLock | None) -> OpenJob:
    current = _as_stored(job_fingerprint(config, [identity_of(source) for source in sources]))
    _check_siblings(directory, current)
    manifest = _this_job(directory, config, sources, current, directory.load_progress())
    progress = directory.load_progress()  # again: a new job has removed the old ledger
    done = RowSet()  # the rows of live commits, as the run learns of them
    ledger = directory.open_ledger(manifest, progress, done)  # a local one cuts off a line torn by a crash first
    _repair(directory, ledger, progress, done)
    directory.prepare_results(progress)
    files = [InputFile(**item, storage_options=config.storage_options) for item in manifest["inputs"]]
    rows = directory.shard.rows(manifest["rows_total"])
    if not rows:
        logger.warning("%s: the input holds no rows%s; there is nothing to do", directory.root,
                       "" if directory.shard.whole else f" for {directory.shard.describe()}")
    for damaged in progress.new_damage:
        logger.warning("%s line %d is damaged and was skipped; if it recorded a commit, its rows are done again; "
                       "if the job record, it is written again", directory.ledger_path, damaged.line)
    if progress.new_damage:
        ledger.report_damage(progress.new_damage)
    return OpenJob(directory, files, rows, done, progress, ledger, lock)


def _this_job(directory: JobDir, config: JobConfig, sources: list[Source], current: dict[str, Any],
              progress: JobProgress) -> dict[str, Any]:
    """The manifest of the job in `directory` when it is this job; else that of a new job, written now.
    The trusted copy of the job record decides (JobDir.job_record), and job.json is written again from
    it if missing or edited. With no trusted copy, committed results are kept only for the job their
    commits name, whose record is then rebuilt from a scan of the inputs."""
    stored = directory.job_record(progress)
    if stored is None and progress.commits and not _named_by_every_commit(progress, current):
        if not config.force:
            raise UsageError(f"{directory.record_lost()}: this run may not add to them; pass --force to discard "
                             f"them and start over, or choose another --output")
        directory.reset()
    if stored is not None:
        changed = differences(stored["fingerprint"], current)
        if not changed:
            if directory.read_manifest() != stored:
                directory.write_manifest(stored)
            return stored
        if not config.force:
            raise UsageError(f"{directory.root} holds a different job ({'; '.join(changed)}); rerun with the "
                             f"same settings to resume it, pass --force to discard its results and start over, "
                             f"or choose another --output")
        directory.reset()
    files = scan_inputs(sources)
    manifest = new_manifest(job_fingerprint(config, [file.identity() for file in files]),
                            [file.to_json() for file in files], sum(file.rows for file in files), directory.shard)
    return directory.write_manifest(manifest)


def _named_by_every_commit(progress: JobProgress, fingerprint: dict[str, Any]) -> bool:
    return all(commit.job == job_id(fingerprint) for commit in progress.files)


def _repair(directory: JobDir, ledger: Ledger | RemoteLedger, progress: JobProgress, done: RowSet) -> None:
    """Void every committed file that is not as committed, or that holds a row an earlier one holds;
    adds the rows of the others, which are done, to `done`. Files are checked byte for byte on disk,
    by size on a store (where `status --verify` checks their bytes)."""
    files = directory.results()
    for commit in progress.files:
        row_ids = commit.row_ids()
        reason = files.damage(commit.file, commit.size, commit.digest if directory.verified_at_start else None)
        if reason is None and any(row in done for row in row_ids):
            reason = "it holds rows another committed file holds"
        if reason is None:
            done.update(row_ids)
            continue
        void = Void(commit.seq, commit.file, reason)
        ledger.append(void)
        progress.void(void)
        logger.warning("%s: %s; its %d rows will be done again", files.location(commit.file), reason, commit.rows)


def _check_output_outside_inputs(config: JobConfig, sources: list[Source]) -> None:
    """A job must not read its own results: on a rerun, its ledger and result files would be input."""
    inside = (_inputs_around_remote(config.output, config.input, sources) if is_remote(config.output)
              else _inputs_around_local(config.output, config.input, sources))
    if inside:
        raise UsageError(f"--output {config.output} is inside the input {inside[0]} (or holds it): the job would "
                         f"read its own results; choose an --output outside every --input")


def _inputs_around_local(output: str, specs: list[str], sources: list[Source]) -> list[str]:
    """The local input directories that hold ``output``, and the input files in it (but its own input table)."""
    root = Path(output).expanduser().resolve()
    inside = [spec for spec in specs if Path(spec).expanduser().is_dir()
              and root.is_relative_to(Path(spec).expanduser().resolve())]
    own_table = JobDir(root).input_table_path
    local = [Path(source.path) for source in sources if not is_remote(source.path)]
    return inside + [str(path) for path in local if path.is_relative_to(root) and path.resolve() != own_table]


def _inputs_around_remote(output: str, specs: list[str], sources: list[Source]) -> list[str]:
    """The input prefixes on the store that hold the ``output`` prefix, and the input objects under it:
    URLs compared as prefixes ending in /, since a store has no directories to resolve."""
    prefix = output.rstrip("/") + "/"
    holding = [spec for spec in specs if is_remote(spec) and not glob.has_magic(spec)
               and prefix.startswith(spec.rstrip("/") + "/")]
    return holding + [source.path for source in sources if source.path.startswith(prefix)]


def _check_ours_alone(directory: JobDir) -> None:
    """Before anything is written or deleted: no links among the job's files, and nothing in its results
    folder that bulkinfer did not write (a run deletes the files of its own that the ledger does not list)."""
    directory.check_entries()
    foreign = directory.results().foreign()
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UsageError(f"{foreign[0]}{more}: not written by bulkinfer, in a results folder that holds only "
                         f"bulkinfer's files; move it out of {directory.root}, then rerun")


def _check_siblings(directory: JobDir, current: dict[str, Any]) -> None:
    """The shards running into one directory must be shards of one job, split the same way."""
    for other in directory.siblings():
        if other.shard == directory.shard:
            continue
        if other.shard.count != directory.shard.count:
            raise UsageError(f"{directory.root} holds a job split into {other.shard.count} shard(s); this run is "
                             f"split into {directory.shard.count}: split it the same way, or choose another --output")
        changed = differences(other.read_job()["fingerprint"], current)
        if changed:
            raise UsageError(f"{directory.root}: its {other.shard.describe()} is a different job "
                             f"({'; '.join(changed)}); every shard must run the same job, or choose another --output")


def _as_stored(value: dict[str, Any]) -> dict[str, Any]:
    """The value as it reads back from job.json (tuples become lists), so equal settings compare equal."""
    return json.loads(json.dumps(value))
