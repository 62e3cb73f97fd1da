"""A job's output directory: the only state a job has, and the reason it can be killed at any instant.

    OUT/job.json      the job record: its fingerprint, input files with row counts, rows_total (the ledger's, copied)
    OUT/ledger.jsonl  append-only: the job record, then committed result files: the one source of truth
    OUT/shards/       result files (shard-000001.parquet, ...); only those the ledger lists count
    OUT/.lock         held by the run writing here
    OUT/stats.json    the last run's figures, written by the command line

A job split into N shards keeps one set of these per shard, named with the shard's suffix
(`job-2-of-4.json`, `ledger-2-of-4.jsonl`, `shards-2-of-4/`, `.lock-2-of-4`), so the shards can run
at once on one directory, each with its own lock and ledger, and each resumes on its own.

Invariants, kept by writing in this order (commit.py): a result file is written to a temporary
name, fsynced and renamed into place; only then is its ledger line appended and fsynced. So every
file the ledger lists exists in full; a file of ours it does not list is left over from a crash and
is deleted on the next start (bulkinfer deletes only its own files: anything else there stops a
run); a torn last ledger line fails its checksum and is cut off. A row is done once its file's
ledger line is durable, and no row is in two committed files. No link in the directory is followed.

    layout.py        where each file lives; job.json, and which copy of the job record to trust
    lock.py          one run per directory (or per shard)
    fingerprint.py   what makes a job this job, compared on every resume
    result_files.py  rows to Parquet or JSONL files and back
    ledger.py        the ledger, and what it says is done
    commit.py        finished rows -> a result file + a ledger line
    no_links.py      no symbolic link in the directory is ever followed

On object storage (s3://, gs://) the same interface keeps the same guarantees with a conditional
create in place of rename, append and lock:

    remote_layout.py  RemoteJobDir: the layout there, job.json created once
    remote_ledger.py  one ledger entry object per commit, created only if absent
    remote_files.py   result files written whole under names unique to their run
    store_errors.py   a failing store is one line
"""
