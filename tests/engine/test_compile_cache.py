"""A job's second process reuses what the first compiled for the CPU: Inductor's cache lives under the
user's cache folder, and the vector instruction set is probed once per machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from bulkinfer.engine.compile_cache import use_persistent_compile_cache

# One engine run whose decode step is big enough for the compiled attention (32 sequences x 141 keys
# >= MIN_KEYS), reporting Inductor's cache counters, the cache folder and the probe processes it started.
_JOB = """
import json, subprocess, sys
probes = []
start = subprocess.Popen.__init__
def watched(self, args, *rest, **options):  # the ISA probe loads a test library in a new Python process
    if "LoadLibrary" in str(args):
        probes.append(args)
    start(self, args, *rest, **options)
subprocess.Popen.__init__ = watched
import os
from torch._dynamo.utils import counters
from bulkinfer.engine.llm import LLM
from bulkinfer.sampling_params import SamplingParams
llm = LLM(sys.argv[1], max_model_len=256)
llm.generate([[5 + i % 50 for i in range(140)]] * 32, SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
print(json.dumps({"cache_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"], "inductor": dict(counters["inductor"]),
                  "probes": len(probes)}))
"""


def _run_job(model: Path, home: Path) -> dict:
    env = {name: value for name, value in os.environ.items()
           if name not in ("TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME", "TORCHINDUCTOR_VEC_ISA_OK")}
    env["HOME"] = str(home)
    result = subprocess.run([sys.executable, "-c", _JOB, str(model)], capture_output=True, text=True, env=env,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow  # a cold Inductor compile: 20 s or more
def test_a_second_process_finds_the_first_ones_compiles_in_the_users_cache(tiny_llama, tmp_path):
    home = tmp_path / "home"
    first, second = _run_job(tiny_llama, home), _run_job(tiny_llama, home)
    cache = home / ".cache" / "bulkinfer" / "inductor"
    assert first["cache_dir"] == second["cache_dir"] == str(cache)
    assert first["inductor"].get("fxgraph_cache_miss", 0) >= 1  # compiled, into the folder
    assert second["inductor"].get("fxgraph_cache_hit", 0) >= 1
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0  # every graph came from the first process
    assert (cache / "bulkinfer-vec-isa.json").is_file()
    if first["probes"]:  # x86: the base instruction sets' probes are not run again
        assert second["probes"] < first["probes"]


def test_the_cache_folder_is_the_users_unless_one_is_chosen(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert use_persistent_compile_cache() == tmp_path / ".cache" / "bulkinfer" / "inductor"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert use_persistent_compile_cache() == tmp_path / "xdg" / "bulkinfer" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # written by importing Inductor
    assert use_persistent_compile_cache() == tmp_path / "xdg" / "bulkinfer" / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "chosen"))
    assert use_persistent_compile_cache() == tmp_path / "chosen"


def test_tests_keep_compiles_out_of_the_real_home(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.environ["TORCHINDUCTOR_CACHE_DIR"])  # restored afterwards
    assert not use_persistent_compile_cache().is_relative_to(Path.home())
