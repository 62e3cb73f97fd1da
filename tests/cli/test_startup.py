"""Commands that only read files start at once: --help, status, export and inspect without --model
import neither torch nor transformers (run and inspect --model import them when they compute)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cli_helpers import DEMO_MODEL, REPO, invoke

DATA = REPO / "examples" / "data" / "addition.jsonl"
COMMANDS = ("run", "export", "status", "inspect", "bench")

_PROBE = """
import json, sys
from bulkinfer.cli import main
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
    except SystemExit as exit:
        assert exit.code == 0, (argv, exit.code)
print(json.dumps(sorted(m for m in ("torch", "transformers", "triton") if m in sys.modules)))
"""


def test_reading_commands_import_no_torch(capsys, tmp_path: Path) -> None:
    out = tmp_path / "out"
    job = ["run", "--model", DEMO_MODEL, "--input", DATA, "--output", out, "--max-tokens", "1"]
    code, _, err = invoke(capsys, *job)
    assert code == 0, err
    commands = [["--help"], *([name, "--help"] for name in COMMANDS),
                ["status", str(out)], ["status", str(out), "--json"], ["export", str(out), str(tmp_path / "r.jsonl")],
                ["export", str(out), str(tmp_path / "r.parquet")], ["inspect", str(DATA)]]
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []
    assert (tmp_path / "r.parquet").exists()


def test_the_probe_would_see_torch(tmp_path: Path) -> None:
    """The same check on a command that needs the engine: it must find torch, or it proves nothing."""
    commands = [["inspect", str(DATA), "--model", str(DEMO_MODEL)]]
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "transformers" in json.loads(result.stdout.splitlines()[-1])


def test_ctrl_c_while_the_commands_load_is_one_line() -> None:
    code = ("import signal, os, sys\n"
            "import bulkinfer.cli\n"
            "import builtins\n"
            "real_import = builtins.__import__\n"
            "def interrupted(name, *args, **kwargs):\n"  # a Ctrl-C that lands while typer is being imported
            "    if name == 'typer':\n"
            "        raise KeyboardInterrupt\n"
            "    return real_import(name, *args, **kwargs)\n"
            "builtins.__import__ = interrupted\n"
            "bulkinfer.cli.main(['--help'])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (130, "bulkinfer: interrupted\n")
