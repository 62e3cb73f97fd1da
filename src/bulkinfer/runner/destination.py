"""Where an export may write: a file of the user's, never inside a job's output directory, whose
files only bulkinfer writes (replacing its ledger or a result file there would silently undo a job); or an
object on a store (s3://, gs://).

Either way nothing appears under the destination's name until the export is complete and counted: a
local file is written under a temporary name and renamed; an object is uploaded in parts that the store
joins into the object in one step when the export publishes it (S3's multipart upload, GCS's resumable
upload), and that are thrown away otherwise.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path
from typing import IO, Any, Iterator

from bulkinfer.errors import UsageError, disk_error
from bulkinfer.runner.outdir.layout import JobDir
from bulkinfer.runner.outdir.remote_layout import OUTPUT_PROTOCOLS, RemoteJobDir
from bulkinfer.runner.storage import filesystem_for, store_errors


def export_destination(destination: Path) -> Path:
    """The file to export to, with `~` expanded; one line if it cannot be one: a directory, a place with
    no folder, or a place inside a job's output directory, whose files only bulkinfer writes."""
    destination = destination.expanduser()
    if destination.is_dir():
        raise UsageError(f"{destination}: is a directory; name the file to write")
    if not destination.parent.is_dir():
        raise UsageError(f"{destination.parent}: no such directory")
    _refuse_inside_job(destination, _enclosing_job(destination))
    return destination


def export_object_destination(url: str, storage_options: dict[str, Any] | None) -> str:
    """The object to export to; one line if it lies under a job's output prefix on the store, whose
    objects only bulkinfer writes."""
    with store_errors(url):
        _refuse_inside_job(url, _enclosing_remote_job(url, storage_options))
    return url


def _refuse_inside_job(destination: Path | str, job: Path | str | None) -> None:
    if job is not None:
        raise UsageError(f"{destination}: inside the job output directory {job}, where only bulkinfer writes; "
                         f"export to a file outside it")


def _enclosing_job(path: Path) -> Path | None:
    """The output directory that holds `path`, or what it links to: the nearest folder up with a job's files."""
    for folder in (path.parent.resolve(), path.resolve().parent):
        for place in (folder, *folder.parents):
            try:
                if JobDir(place).siblings():
                    return place
            except OSError:  # a folder we may not list holds no job of ours
                continue
    return None


def _enclosing_remote_job(url: str, storage_options: dict[str, Any] | None) -> str | None:
    """The nearest prefix above the object at `url` that holds a job; jobs live only on the stores that
    take an output."""
    protocol, _, path = url.partition("://")
    if protocol.lower() not in OUTPUT_PROTOCOLS:
        return None
    folders = path.split("/")[:-1]  # the bucket, then each folder down to the object's
    for end in range(len(folders), 0, -1):
        place = f"{protocol}://{'/'.join(folders[:end])}"
        if RemoteJobDir(place, storage_options).has_job():
            return place
    return None


@contextlib.contextmanager
def writing(destination: Path) -> Iterator[Path]:
    """The temporary file to write before it becomes `destination`, created now so that a place the user
    cannot write to is one line; a full disk while writing is one line too. The file is gone afterwards,
    unless the caller has published it as `destination`."""
    tmp = destination.with_name(f".tmp-{destination.name}")  # keeps the extension that picks the compression
    try:
        tmp.touch()
    except OSError as exc:
        raise UsageError(f"{destination}: cannot be written ({exc.strerror or exc})") from None
    try:
        yield tmp
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise disk_error(exc, str(destination)) from None
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def writing_object(url: str, storage_options: dict[str, Any] | None) -> Iterator[IO[bytes]]:
    """A file to write the object at `url` into, published as the object when the block ends without an
    error; until then the store holds only parts of an upload no one can read."""
    fs, path = filesystem_for(url, storage_options)
    with store_errors(url):
        file = fs.open(path, "wb", autocommit=False)
        try:
            yield file
            file.close()
            file.commit()
        except BaseException:
            with contextlib.suppress(Exception):  # a store that is down keeps the parts until it expires them
                file.discard()
            raise
