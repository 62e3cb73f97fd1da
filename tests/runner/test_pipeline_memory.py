"""Between stages with different models, the first model's memory is given back: measured as the
process's resident memory on the CPU, with a model of about 200 MB."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bulkinfer.bench.random_model import SHAPES, make_random_checkpoint

pytestmark = pytest.mark.slow  # a 50M-parameter checkpoint is written and loaded

PROBE = Path(__file__).with_name("pipeline_memory_probe.py")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="resident memory is read from /proc")
def test_releasing_a_stage_model_gives_its_memory_back(tmp_path: Path) -> None:
    model = make_random_checkpoint(tmp_path / "50m", SHAPES["50m"])
    weights_mb = sum(path.stat().st_size for path in model.glob("*.safetensors")) / 2**20
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt": "hello"}\n')
    probe = subprocess.run([sys.executable, str(PROBE), str(model), str(data), str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=600)
    assert probe.returncode == 0, probe.stderr
    figures = json.loads(probe.stdout.splitlines()[-1])
    assert figures["reused_loads"] == 1
    assert figures["loaded"] - figures["start"] > 0.9 * weights_mb
    # What loading took is given back, all but a tenth of the weights' size (allocator and library caches).
    assert figures["released"] - figures["start"] < 0.1 * weights_mb + 0.1 * (figures["loaded"] - figures["start"])
