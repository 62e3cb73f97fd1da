"""The kernels ship inside the wheel as bulkinfer.kernels, and import from an installed copy.

kernels/ sits outside src/ and is mapped to bulkinfer.kernels by package-dir (pyproject.toml,
setup.py). A wheel is built from a copy of the source tree, so the check leaves no build/ folder
in the checkout; each step is bounded by a timeout so the whole test stays well under a minute.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_TOP_LEVEL_SKIPPED = {".git", "build", "dist", ".pytest_cache", ".venv", ".whl", "tests", "benchmarks", "jobs",
                      "examples"}


def _not_source(folder: str, names: list[str]) -> set[str]:
    # Build outputs and caches anywhere; big or irrelevant top-level folders.
    skipped = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    return skipped | (_TOP_LEVEL_SKIPPED & set(names) if Path(folder) == ROOT else set())


def _python(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=_not_source)
    _python("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
            "-w", str(tmp / "dist"), str(source), cwd=tmp)
    (built,) = (tmp / "dist").glob("bulkinfer-*.whl")
    return built


def test_wheel_holds_every_kernel_file(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"bulkinfer/kernels/{path.name}" for path in (ROOT / "kernels").glob("*.py")}
    assert "bulkinfer/kernels/paged_attention.py" in expected
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"


def test_installed_wheel_imports_the_kernels(wheel: Path, tmp_path: Path):
    site = tmp_path / "site"
    _python("-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel), cwd=tmp_path)
    # Run from an empty folder with the install first on the path, so neither the checkout's
    # kernels/ nor an editable install can answer the import.
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "import bulkinfer.kernels.paged_attention as m\n"
            "print(m.__file__)")
    printed = _python("-c", code, str(site), cwd=tmp_path).stdout.strip()
    assert Path(printed).is_relative_to(site)


def test_current_install_imports_the_kernels(tmp_path: Path):
    # Editable or not, whatever this interpreter has installed must resolve bulkinfer.kernels.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import bulkinfer.kernels.paged_attention as m\n"
            "assert callable(m.paged_attention_ref)\n"
            "print(m.__name__)")
    assert _python("-c", code, cwd=tmp_path, env=env).stdout.strip() == "bulkinfer.kernels.paged_attention"
