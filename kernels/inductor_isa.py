"""Spares every process after the first on a machine TorchInductor's probe of the CPU's vector instructions.

Before its first CPU compile, Inductor checks which vector instruction sets (AVX2, AVX-512, ...) it
can use: for each one the CPU reports, it builds a test library and loads it in a new Python
process. Its compile caches keep the builds, but the loads run again in every process: ten Python
processes on an AVX-512 machine, about a second on a quiet one, five under load, which the first
decode step of every job paid even when every compiled graph came from the cache.

Inductor's ``cpp.vec_isa_ok`` setting skips the base check (its checks for VNNI and AMX still run).
The first process on a machine probes as usual, then confirms that trusting the CPU's flags picks the
same instruction set, and records that in the compile cache's folder, under a key that changes with
torch, the CPU's flags and the C++ compiler. Later processes read the record and skip the probe.
Every compile then runs with the setting, so the first process's cached graphs match later ones'
(the setting is part of Inductor's cache key). A machine where trusting the flags would pick another
set (a compiler that cannot build one the CPU has) keeps probing.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
from pathlib import Path

import torch

from bulkinfer.durable import write_atomic

logger = logging.getLogger(__name__)

RECORD_NAME = "bulkinfer-vec-isa.json"


def skip_repeated_isa_probe() -> None:
    """Call before the first torch.compile for the CPU. A choice of TORCHINDUCTOR_VEC_ISA_OK is kept."""
    from torch._inductor import config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    if config.cpp.vec_isa_ok is not None:
        return
    record = Path(cache_dir()) / RECORD_NAME
    key = _machine_key()
    if _recorded_key(record) == key:
        config.cpp.vec_isa_ok = True
    elif _flags_pick_the_probed_isa():
        try:
            write_atomic(record, json.dumps({"key": key}).encode())
        except OSError as exc:  # only a later process's time is at stake
            logger.debug("could not record the vector instruction set in %s: %s", record, exc)


def _flags_pick_the_probed_isa() -> bool:
    """Probes as Inductor does, then trusts the CPU's flags if they pick the same set (left set if so)."""
    from torch._inductor import config, cpu_vec_isa

    probed = str(cpu_vec_isa.pick_vec_isa())
    config.cpp.vec_isa_ok = True
    cpu_vec_isa.valid_vec_isa_list.cache_clear()  # its list was made under the probe
    if str(cpu_vec_isa.pick_vec_isa()) == probed:
        return True
    config.cpp.vec_isa_ok = None
    cpu_vec_isa.valid_vec_isa_list.cache_clear()
    return False


def _machine_key() -> str:
    """What the probe's answer depends on: torch, the CPU, the compiler Inductor would run."""
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import x86_isa_checker

    compilers = []
    for name in filter(None, config.cpp.cxx):
        found = shutil.which(name)
        compilers.append([name, found, os.stat(found).st_mtime_ns if found else None])
    return json.dumps([torch.__version__, platform.machine(), x86_isa_checker(), os.environ.get("ATEN_CPU_CAPABILITY"),
                       compilers])


def _recorded_key(record: Path) -> str | None:
    try:
        return json.loads(record.read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
