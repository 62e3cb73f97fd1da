"""Where TorchInductor keeps what it compiles for the CPU, so that a job's next process reuses it.

The CPU's decode attention is compiled by TorchInductor (kernels/paged_attention_cpu.py): about 20 s
the first time on a machine. Inductor caches the compiled graphs (its FX graph and AOTAutograd
caches) on disk, by default under the system's temporary folder, which many machines empty at boot
and containers do not keep. The engine points it at ``~/.cache/bulkinfer/inductor`` instead
(``$XDG_CACHE_HOME/bulkinfer/inductor`` where that is set), so a machine compiles once; a
``TORCHINDUCTOR_CACHE_DIR`` the user set wins. Inductor reads the variable at each cache access, so
setting it when the engine starts, before its first compile, is enough. Importing Inductor writes
torch's default folder into the variable (llguidance imports it, and the engine imports llguidance),
so that value counts as unset.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bulkinfer" / "inductor"


def use_persistent_compile_cache() -> Path:
    """Points Inductor's caches at bulkinfer's cache folder unless the user chose one; returns the folder."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir as torch_default

    chosen = os.environ.get(CACHE_DIR_VARIABLE)
    if chosen is None or chosen == os.path.abspath(torch_default()):
        os.environ[CACHE_DIR_VARIABLE] = chosen = str(default_cache_dir())
    return Path(chosen)
