"""Which shard of the input a run does, when N processes split one job (`--num-shards N --shard I`).

Shard I of N takes the contiguous block of row positions [I*T//N, (I+1)*T//N) of the T input rows.
T is fixed by the job's input files, so the blocks are disjoint, cover every row, and stay the same
across resumes. Contiguous blocks (not every N-th row) let each shard skip whole files and let export
read each result shard for one stretch of positions only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig

# Kubernetes gives an indexed Job's pods their index but not the count; the manifest passes it here.
COUNT_VARIABLE = "BULKINFER_NUM_SHARDS"


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @property
    def whole(self) -> bool:
        return self.count == 1

    @property
    def suffix(self) -> str:
        """Appended to the names of this shard's files in the output directory; none for a whole job."""
        return "" if self.whole else f"-{self.index}-of-{self.count}"

    def rows(self, rows_total: int) -> range:
        return range(self.index * rows_total // self.count, (self.index + 1) * rows_total // self.count)

    def describe(self) -> str:
        return f"shard {self.index} of {self.count}"


WHOLE = Shard(0, 1)


def shard_of(config: JobConfig, environ: Mapping[str, str] = os.environ) -> Shard:
    """The flags decide; without --shard, a Slurm array task or Kubernetes indexed Job index does."""
    index, count = config.shard, config.num_shards
    if index is None and "SLURM_ARRAY_TASK_ID" in environ:
        index = _int(environ, "SLURM_ARRAY_TASK_ID") - _int(environ, "SLURM_ARRAY_TASK_MIN", 0)
        count = count or _int(environ, "SLURM_ARRAY_TASK_COUNT", None)
    elif index is None and "JOB_COMPLETION_INDEX" in environ:
        index = _int(environ, "JOB_COMPLETION_INDEX")
        count = count or _int(environ, COUNT_VARIABLE, None)
    if index is None:
        if count not in (None, 1):
            raise UsageError(f"--num-shards {count} needs --shard I (or SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)")
        return WHOLE
    if count is None:
        raise UsageError(f"shard {index} given without the number of shards: pass --num-shards N "
                         f"(or set {COUNT_VARIABLE})")
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"shard {index} of {count}: the shard must be in 0..{count - 1}")
    return Shard(index, count)


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    value = environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not a whole number") from None
