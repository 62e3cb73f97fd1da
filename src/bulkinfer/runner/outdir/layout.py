"""Where each of a job's files lives in its output directory, and its manifest, job.json.

The job record is kept in two places and checked against a third: the ledger's job record, job.json,
and the job id stamped on every commit. A copy is trusted only when it is sound and names the job the
commits name; a damaged copy is written again from a trusted one (job.json replaced atomically, a
new job record appended to the ledger). With neither copy trusted, the commits alone decide: a run of
the job they name may rebuild the record, any other is refused (see open_job).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bulkinfer.durable import sync_dir, write_atomic
from bulkinfer.errors import RunError, UsageError
from bulkinfer.runner.outdir.ledger import Commit, Damaged, JobProgress, Ledger, job_id, load_progress, read_records
from bulkinfer.runner.outdir.lock import current_holder
from bulkinfer.runner.outdir.no_links import link_refusal, read_no_follow
from bulkinfer.runner.outdir.result_files import ResultFiles
from bulkinfer.runner.rowset import RowSet
from bulkinfer.runner.shards import WHOLE, Shard

MANIFEST_VERSION = 1
_MANIFEST_TYPES = {"fingerprint": dict, "inputs": list, "rows_total": int}
# readers.InputFile's: a local file's, and an object's on a store
_INPUT_TYPES = ({"path": str, "format": str, "size": int, "mtime_ns": int, "rows": int},
                {"path": str, "format": str, "size": int, "version": str, "rows": int})
_SUFFIX = r"(?:-(\d+)-of-(\d+))?"
_JOB_FILE_NAME = re.compile(rf"(?:job{_SUFFIX}\.json|ledger{_SUFFIX}\.jsonl)")
# input-table.jsonl is the table a command derives from the user's input (an OpenAI batch file's requests)
# and then runs: the job's own input, kept with its state.
INPUT_TABLE = "input-table.jsonl"
# Every name a run of any shard creates here (a crash before job.json may leave some of them);
# stats.json is the CLI's end-of-run report (bulkinfer.cli.summary).
_OUR_NAMES = re.compile(rf"(?:job{_SUFFIX}\.json|ledger{_SUFFIX}\.jsonl|shards{_SUFFIX}|\.lock{_SUFFIX}"
                        rf"|\.job{_SUFFIX}\.json\.tmp|stats{_SUFFIX}\.json|\.stats{_SUFFIX}\.json\.tmp"
                        rf"|{re.escape(INPUT_TABLE)}(?:\.tmp)?)")
_RESULTS_FOLDER = re.compile(rf"shards{_SUFFIX}")


class JobDir:
    verified_at_start = True  # a run's start checks every committed file's bytes, not just its size

    def __init__(self, root: Path, shard: Shard = WHOLE) -> None:
        self.root = root
        self.shard = shard
        self.manifest_path = root / f"job{shard.suffix}.json"
        self.ledger_path = root / f"ledger{shard.suffix}.jsonl"
        self.results_path = root / f"shards{shard.suffix}"  # the result files
        self.lock_path = root / f".lock{shard.suffix}"
        self.input_table_path = root / INPUT_TABLE  # one for every shard

    def check_free(self) -> None:
        """Raises UsageError unless this directory holds a job or is new, or empty: a run never writes among
        files of the user's."""
        if self.root.is_dir() and not self.siblings() and self.holds_other_files():
            raise UsageError(f"{self.root}: exists, is not empty and holds no bulkinfer job; "
                             f"choose an empty or new --output directory")

    def has_job(self) -> bool:
        """Whether a job was started here: a sound job.json, or a ledger with a sound line (a job whose
        record is lost is still a job: it is refused, never overwritten)."""
        return (self.read_manifest() is not None
                or any(not isinstance(record, Damaged) for record in read_records(self.ledger_path)))

    def holds_other_files(self) -> bool:
        """Whether anything but the files of bulkinfer runs is here: another name, or a job.json or
        ledger with content that no run wrote."""
        if any(not _OUR_NAMES.fullmatch(path.name) for path in self.root.iterdir()):
            return True
        return any(not shard.has_job() and shard._holds_records() for shard in self._named_shards())

    def check_entries(self) -> None:
        """Raises UsageError naming the first of bulkinfer's entries here (of any shard) or file in a
        results folder that is a symbolic link (see no_links), or a FIFO, socket or device where a
        file should be (opening it could hang)."""
        for path in sorted(self.root.iterdir()):
            if not _OUR_NAMES.fullmatch(path.name):
                continue
            if path.is_symlink():
                raise UsageError(link_refusal(path))
            if _RESULTS_FOLDER.fullmatch(path.name) and path.is_dir():
                linked = next((inner for inner in sorted(path.iterdir()) if inner.is_symlink()), None)
                if linked is not None:
                    raise UsageError(link_refusal(linked))
            elif not path.is_file():
                raise UsageError(f"{path}: is not a regular file, so it is not bulkinfer's; move it away, or "
                                 f"choose another --output")

    def siblings(self) -> list[JobDir]:
        """Every shard with a job here (this one included, if it has one), in shard order."""
        return [shard for shard in self._named_shards() if shard.has_job()]

    def _named_shards(self) -> list[JobDir]:
        """Every shard with a job.json or a ledger here, sound or not, in shard order."""
        found = set()
        for path in self.root.iterdir():
            match = _JOB_FILE_NAME.fullmatch(path.name)
            if match:
                index, count = (match[1], match[2]) if match[1] else (match[3], match[4])
                found.add(Shard(int(index), int(count)) if index else WHOLE)
        return [JobDir(self.root, shard) for shard in sorted(found, key=lambda shard: (shard.count, shard.index))]

    def create_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{self.root}: cannot create the output directory ({exc.strerror})") from None
        if not self.root.is_dir():
            raise UsageError(f"{self.root}: exists and is not a directory")

    def read_job(self, progress: JobProgress | None = None) -> dict[str, Any]:
        """The job record (job_record); RunError if no copy of it can be trusted. `progress`: the
        ledger's, if already read."""
        record = self.job_record(progress or self.load_progress())
        if record is None:
            raise RunError(f"{self.record_lost()}; rerun the job's own command to rebuild it from its inputs")
        return record

    def job_record(self, progress: JobProgress) -> dict[str, Any] | None:
        """The first trusted copy of the job record: the ledger's, else job.json. A copy is trusted when
        it is sound and every live commit that names a job names this one."""
        named = progress.job_ids()
        for record in (progress.job, self.read_manifest()):
            if record is not None and is_manifest(record) and named <= {job_id(record["fingerprint"])}:
                return record
        return None

    def record_lost(self) -> str:
        """Why no copy of the job record can be trusted."""
        return (f"{self.root}: the job record in {_name(self.ledger_path)} is damaged and {_name(self.manifest_path)} "
                f"is missing, damaged or of another job, so which job its committed results belong to is unknown")

    def read_manifest(self) -> dict[str, Any] | None:
        """job.json as it is on disk, if it is a sound job record."""
        try:
            with read_no_follow(self.manifest_path) as handle:
                manifest = json.loads(handle.read())
        except (OSError, ValueError):
            return None
        return manifest if is_manifest(manifest) else None

    def _holds_records(self) -> bool:
        return any(path.is_file() and path.stat().st_size > 0 for path in (self.manifest_path, self.ledger_path))

    def write_manifest(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Write job.json; returns the job record now there."""
        self.results_path.mkdir(exist_ok=True)
        write_atomic(self.manifest_path, json.dumps(manifest, indent=1).encode())
        return manifest

    def results(self, fmt: str = "parquet", input_types: dict[str, pa.DataType] | None = None,
                result_types: dict[str, pa.DataType] | None = None) -> ResultFiles:
        """The results folder, writing `fmt` files (see ResultFiles)."""
        return ResultFiles(self.results_path, fmt, input_types, result_types)

    def load_progress(self) -> JobProgress:
        return load_progress(self.ledger_path)

    def open_ledger(self, job: dict[str, Any], progress: JobProgress, done: RowSet) -> Ledger:
        """The ledger, for this run alone to append to (it holds the lock): `progress` and `done` are
        kept by the run itself."""
        return Ledger(self.ledger_path, job=job)

    def prepare_results(self, progress: JobProgress) -> None:
        """The results folder, made again if removed by hand (its rows are redone), without the files
        of ours that no commit lists: a crash left them, and only this run writes here."""
        self.results_path.mkdir(exist_ok=True)
        self.results().remove_except({commit.file for commit in progress.files})

    def running(self) -> bool:
        return current_holder(self.lock_path) is not None

    def settle_damage(self, job: dict[str, Any], damaged: list[tuple[Commit, str]]) -> None:
        """Nothing to record: the next run checks every file's bytes as it starts, and voids the damaged."""

    def reset(self) -> None:
        """Forget the previous job here. The ledger goes first: without it no result file counts any more."""
        self.ledger_path.unlink(missing_ok=True)
        shutil.rmtree(self.results_path, ignore_errors=True)
        self.manifest_path.unlink(missing_ok=True)
        sync_dir(self.root)


def new_manifest(fingerprint: dict[str, Any], inputs: list[dict[str, Any]], rows_total: int,
                 shard: Shard) -> dict[str, Any]:
    return {"version": MANIFEST_VERSION, "fingerprint": fingerprint, "inputs": inputs, "rows_total": rows_total,
            "num_shards": shard.count, "shard": shard.index, "created": time.strftime("%Y-%m-%d %H:%M:%S")}


def is_manifest(manifest: Any) -> bool:
    """Whether `manifest` is a job record this version reads: every key there, of its type."""
    return (isinstance(manifest, dict) and manifest.get("version") == MANIFEST_VERSION
            and _typed(manifest, _MANIFEST_TYPES) and manifest["rows_total"] >= 0
            and all(_is_input(item) for item in manifest["inputs"]))


def _is_input(item: Any) -> bool:
    return isinstance(item, dict) and any(set(item) == set(types) and _typed(item, types) for types in _INPUT_TYPES)


def _typed(record: dict[str, Any], types: dict[str, type]) -> bool:
    return all(isinstance(record.get(key), kind) for key, kind in types.items())


def _name(path: Path | str) -> str:
    return str(path).rsplit("/", 1)[-1]


def task_of(fingerprint: dict[str, Any]) -> str:
    """The job's task, as the fingerprint records it: a generation job's fingerprint does not name it."""
    return fingerprint.get("task", "generate")
